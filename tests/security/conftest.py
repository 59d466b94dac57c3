"""The extraction tests' fixtures for a real fake-OpenAI server, shared: the doors and the hostile-provider
tests drive the same pipeline against it."""

from tests.extraction.conftest import dispatched, fake_llm, fake_server, fast_retries  # noqa: F401
