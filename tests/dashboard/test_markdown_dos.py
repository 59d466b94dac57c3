"""Markdown rendering is bounded (issue 8 item 4): shapes that made the old renderer take a minute of
CPU (nested brackets) or crash (deeply nested lists) render promptly, stay sanitised, and text past
the size cap is shown escaped as plain text with a note."""

from __future__ import annotations

import signal
from contextlib import contextmanager

import pytest
from django.urls import reverse

from memory_admin.models import Notebook
from tests.dashboard.test_xss import PAYLOAD, SCRIPT, problems_in

LIMIT_S = 10  # generous: each of these takes well under a second; the old renderer took 35 s to minutes


@contextmanager
def deadline(seconds: int = LIMIT_S):
    """Fail (rather than hang the suite) when rendering runs past `seconds`."""

    def expired(signum, frame):
        raise TimeoutError(f"rendering took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def preview(client, tenant, content: str) -> str:
    with deadline():
        r = client.post(reverse("markdown_preview", args=[tenant.slug]), {"content": content})
    assert r.status_code == 200
    html = r.content.decode()
    assert problems_in(html) == []
    return html


@pytest.mark.parametrize(
    "content",
    [
        "[" * 40_000,
        "[[[[" * 10_000 + "](",
        "[a](" * 10_000,
        "![" * 20_000,
        "*a_" * 13_000,
    ],
    ids=["open-brackets", "nested-brackets-paren", "open-links", "open-images", "emphasis"],
)
def test_bracket_bombs_preview_promptly(operator, tenant, content):
    html = preview(operator, tenant, content)
    assert content[:12] in html  # the text itself is on the page


def test_nested_bracket_notebook_page_renders_promptly(operator, tenant, memory_user):
    content = "[[[[" * 7_500 + "](" + "\n\n**kept**"
    Notebook.objects.create(tenant=tenant, memory_user=memory_user, content=content, version=1)
    with deadline():
        r = operator.get(reverse("user_notebook", args=[tenant.slug, memory_user.pk]))
    assert r.status_code == 200
    html = r.content.decode()
    assert "<strong>kept</strong>" in html and "[[[[" in html


@pytest.mark.parametrize(
    "content",
    [
        "".join("  " * i + "- item\n" for i in range(2_000)),  # 4 MB of ever deeper list items
        "- " * 2_000_000,
    ],
    ids=["indented-list", "dash-run"],
)
def test_four_megabyte_nested_list_is_plain_text(operator, tenant, content):
    assert len(content) >= 2_000_000
    html = preview(operator, tenant, content)
    assert "Shown as plain text" in html
    assert "<li>" not in html


@pytest.mark.parametrize(
    "content",
    [
        "".join("  " * i + "- item\n" for i in range(300)),
        "> " * 45_000 + "deep",
        "> " * 40_000 + "\n" + "- " * 10_000,
    ],
    ids=["indented-list", "quotes", "quotes-then-list"],
)
def test_deep_nesting_under_the_cap_renders_bounded(operator, tenant, content):
    html = preview(operator, tenant, content)
    assert "Shown as plain text" not in html
    assert html.count("<blockquote>") <= 25 and html.count("<ul>") <= 25


def test_oversized_text_is_escaped_with_a_note(operator, tenant, settings):
    big = (PAYLOAD + "\n\n") * 2_000 + "**not bold**"
    assert len(big.encode()) > settings.MARKDOWN_MAX_INPUT_BYTES
    html = preview(operator, tenant, big)
    assert "Shown as plain text" in html
    assert SCRIPT not in html and "&lt;script&gt;" in html
    assert "<strong>" not in html and "**not bold**" in html


def test_rendered_size_cap(operator, tenant, settings):
    settings.MARKDOWN_MAX_HTML_BYTES = 2_000
    html = preview(operator, tenant, "|a|b|\n|-|-|\n" + "|x|y|\n" * 200)
    assert "too large a page" in html and "<table>" not in html
    settings.MARKDOWN_MAX_HTML_BYTES = 1_000_000
    assert "<table>" in preview(operator, tenant, "|a|b|\n|-|-|\n" + "|x|y|\n" * 200)


def test_formatting_still_works(operator, tenant):
    html = preview(
        operator,
        tenant,
        "# Title\n\n- one\n- two\n\n`code` ~~gone~~ [ok](https://example.com)\n\n```\nfenced\n```\n\n" + PAYLOAD,
    )
    assert "<h3>Title</h3>" in html and "<h1>Title" not in html
    assert "<li>one</li>" in html and "<code>code</code>" in html
    assert "<s>gone</s>" in html and 'href="https://example.com"' in html and "<pre><code>fenced" in html
    assert 'href="javascript' not in html and SCRIPT not in html
