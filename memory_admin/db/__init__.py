"""Driver-level speed code, at the bottom of the project: statements compiled once and bound per request
(`compiled`), prepared statements with binary rows (`cursors`), and model instances from raw rows
(`hydrate`). Nothing here knows about facts or search; retrieval and the write path build on it."""
