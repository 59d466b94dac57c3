"""The API's documentation page, served whole from this install: Swagger UI is vendored under
static/vendor/ with its version in the path (like htmx), so `/api/v1/docs` works air-gapped.

ninja's own Swagger page falls back to a CDN unless `ninja` is an installed app, and its page runs an
inline script; this one keeps the site's Content-Security-Policy (`script-src 'self'`): the settings
travel as a JSON data island and static/js/api-docs.js starts the viewer."""

from __future__ import annotations

from django.shortcuts import render
from ninja.openapi.docs import DocsBase

SWAGGER_UI_VERSION = "5.32.0"


class OfflineSwagger(DocsBase):
    settings = {"layout": "BaseLayout", "deepLinking": True}

    def render_page(self, request, api, **kwargs):
        settings = dict(self.settings, url=self.get_openapi_url(api, kwargs))
        return render(
            request,
            "api/docs.html",
            {"api": api, "swagger_settings": settings, "swagger_ui": f"vendor/swagger-ui-{SWAGGER_UI_VERSION}"},
        )
