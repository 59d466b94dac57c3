"""Dashboard views (SPEC §9): function views, one module per area; htmx requests get partials."""
