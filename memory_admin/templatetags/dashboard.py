"""Template helpers for the dashboard. Memory content is untrusted: the only filter that returns
markup is `markdown`, and it sanitises with nh3 after rendering."""

from __future__ import annotations

import math
from datetime import datetime

import nh3
from django import template
from django.conf import settings
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from memory_admin.scoring import EVICTION_THRESHOLD, STALE_THRESHOLD

register = template.Library()

# Tags a notebook or skill may use; no images (they fetch URLs when the page loads), no raw HTML.
_TAGS = {
    "a",
    "abbr",
    "b",
    "blockquote",
    "br",
    "code",
    "del",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "li",
    "ol",
    "p",
    "pre",
    "s",
    "strong",
    "sub",
    "sup",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
}


# markdown-it-py: a CommonMark parser designed to run in linear time on any input (delimiter and
# link-label scans are cached; nesting is bounded by maxNesting, past which it stops descending).
# Raw HTML is off, so tags in content come out as text; nh3 still sanitises what it renders.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "maxNesting": 20}).enable(["table", "strikethrough"])


def _plain(text: str, why: str) -> SafeString:
    return format_html('<p class="muted small">{}</p><pre class="wrap">{}</pre>', why, text)


@register.filter(name="markdown")
def render_markdown(text: str | None) -> SafeString:
    """Markdown to sanitised HTML. Above MARKDOWN_MAX_INPUT_BYTES of input, or when the HTML would
    pass MARKDOWN_MAX_HTML_BYTES, the text is shown escaped as it is, with a note saying why: the
    render time and the page size stay bounded whatever a notebook or skill holds."""
    text = text or ""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > settings.MARKDOWN_MAX_INPUT_BYTES:
        return _plain(
            text,
            f"Shown as plain text: {size // 1024} KB is more than the "
            f"{settings.MARKDOWN_MAX_INPUT_BYTES // 1024} KB the dashboard formats.",
        )
    html = _MARKDOWN.render(text)
    if len(html.encode("utf-8", "surrogatepass")) > settings.MARKDOWN_MAX_HTML_BYTES:
        return _plain(text, "Shown as plain text: formatted, this text would make too large a page.")
    clean = nh3.clean(
        html,
        tags=_TAGS,
        attributes={"a": {"href", "title"}, "th": {"align"}, "td": {"align"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # noqa: S308 -- sanitised by nh3 just above


@register.filter
def pct(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{float(value) * 100:.{digits}f}%"


@register.filter
def num(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    return f"{float(value):.{digits}f}"


@register.filter
def age(value: datetime | None, until: datetime | None = None) -> str:
    """How long ago (or from `value` to `until`), as Django's timesince says it, but "less than a
    minute" rather than "0 minutes"."""
    from django.utils import timezone
    from django.utils.timesince import timesince

    if value is None:
        return "–"
    if ((until or timezone.now()) - value).total_seconds() < 60:
        return "less than a minute"
    return timesince(value, until)


@register.filter
def score(value: float | None) -> str:
    """A 0-1 score cut (not rounded) to two decimals: 0.8999 reads 0.89, so a fact listed under
    "0.8 to under 0.9" never shows 0.90, and a value shows the band (tenth) the charts count it in."""
    if value is None:
        return "–"
    return f"{math.floor(float(value) * 100 + 1e-9) / 100:.2f}"


@register.filter
def staleness_level(score: float | None) -> str:
    """fresh / stale / evict: the badge a staleness score earns (SPEC §7 thresholds)."""
    if score is None:
        return "fresh"
    if score > EVICTION_THRESHOLD:
        return "evict"
    if score > STALE_THRESHOLD:
        return "stale"
    return "fresh"


@register.filter
def short_id(value) -> str:
    return str(value)[:8]


@register.filter
def get_item(mapping: dict, key: str):
    return mapping.get(key, "") if hasattr(mapping, "get") else ""


@register.filter
def pretty_json(value) -> str:
    """JSON for display inside <pre>; the template escapes it like any other text."""
    import json

    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
