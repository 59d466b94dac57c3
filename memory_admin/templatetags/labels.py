"""One label vocabulary for the dashboard: stored codes (`agent_inferred`, `queued_for_review`) shown as
words, member-friendly where members look, and headings of rendered markdown moved under the page's."""

from __future__ import annotations

import re

from django import template
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# code -> (staff wording, member wording or None for the same)
LABELS: dict[str, tuple[str, str | None]] = {
    # fact sources
    "user_stated": ("stated by the user", "you said it"),
    "user_correction": ("corrected by a person", "you corrected it"),
    "agent_stated": ("saved by an agent", "an assistant noted it"),
    "agent_inferred": ("inferred by an agent", "an assistant guessed it"),
    "tool_verified": ("verified by a tool", "checked by a tool"),
    "recalled": ("recalled from memory", "remembered from earlier"),
    "external": ("from an external source", "from another system"),
    "notebook": ("from the notebook", "from your notebook"),
    # fact statuses
    "active": ("active", "in use"),
    "superseded": ("replaced", "replaced by a newer version"),
    "stale": ("stale", "old, used less"),
    "evicted": ("removed", "no longer used"),
    "quarantined": ("held for review", "held for review"),
    # write outcomes
    "created": ("created", None),
    "updated": ("updated", None),
    "deduplicated": ("deduplicated", None),
    "merged": ("merged", None),
    "superseded_existing": ("replaced an older fact", None),
    "queued_for_review": ("sent to review", None),
    "overruled": ("overruled by the notebook", None),
    "rejected_low_confidence": ("rejected: low confidence", None),
    "blocked": ("blocked", None),
    "redacted": ("redacted", None),
    "flagged": ("flagged", None),
    "capped": ("over the fact cap", None),
    "over_budget": ("over the token budget", None),
    "duplicate": ("same words as a listed fact", None),
    # review resolutions
    "keep_a": ("kept A", None),
    "keep_b": ("kept B", None),
    "both_true": ("both true", None),
    "dismiss": ("dismissed", None),
    "merge": ("merged", None),
}


@register.filter
def label(code, member: bool = False) -> str:
    """The words for a stored code; an unknown code is shown with spaces instead of underscores."""
    if code is None or code == "":
        return "—"
    text = str(code)
    staff, member_text = LABELS.get(text, (text.replace("_", " "), None))
    return member_text if member and member_text else staff


@register.filter
def labels(codes, member: bool = False) -> str:
    """Distinct codes as words, in first-seen order ("over_budget, over_budget" reads once)."""
    seen: list[str] = []
    for code in codes or ():
        words = label(code, member)
        if words not in seen:
            seen.append(words)
    return ", ".join(seen)


_HEADING = re.compile(r"<(/?)h([1-6])\b")


@register.filter
def demote_headings(html: str, by: int = 2) -> SafeString:
    """Move headings of rendered (already sanitised) markdown under the page's: a notebook's `# Alice`
    inside a preview is an H3, not a second H1."""
    out = _HEADING.sub(lambda m: f"<{m.group(1)}h{min(6, int(m.group(2)) + int(by))}", str(html))
    return mark_safe(out)  # noqa: S308 -- tag names changed in markup that was sanitised before


def _flatten(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}{key}." if isinstance(inner, dict) else f"{prefix}{key}"))
            if isinstance(inner, dict) and not inner:
                out[f"{prefix}{key}"] = "{}"
        return out
    return {prefix.rstrip(".") or "value": value}


@register.filter
def changes(event) -> list[dict]:
    """An audit event's before/after as rows (field, before, after, changed), changed fields first:
    what the two JSON blobs differ in, without reading them side by side."""
    before = _flatten(event.before) if event.before is not None else {}
    after = _flatten(event.after) if event.after is not None else {}
    rows = []
    for field in list(dict.fromkeys([*before, *after])):
        old, new = before.get(field), after.get(field)
        rows.append(
            {
                "field": field,
                "before": "—" if old is None else old,
                "after": "—" if new is None else new,
                "changed": old != new,
            }
        )
    rows.sort(key=lambda r: not r["changed"])
    return rows


@register.filter
def actor_name(actor, request) -> str:
    """Who did it, in the reader's words: "you" for the signed-in account; for members, "an assistant"
    instead of `agent:<name>` and "a team member" instead of another `staff:<username>`."""
    text = str(actor or "")
    if not text:
        return "—"
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and text == f"staff:{user.get_username()}":
        return "you"
    if getattr(request, "is_member", False):
        if text.startswith("agent:"):
            return "an assistant"
        if text.startswith("staff:"):
            return "a team member"
        return "the system"
    return text
