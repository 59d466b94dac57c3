"""Line diffs of notebook and skill revisions (difflib), as rows a template renders escaped."""

from __future__ import annotations

import difflib


def line_diff(old: str, new: str, *, old_label: str = "before", new_label: str = "after") -> list[dict[str, str]]:
    rows = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), old_label, new_label, n=3, lineterm=""):
        if line.startswith(("---", "+++")):
            op = "file"
        elif line.startswith("@@"):
            op = "hunk"
        elif line.startswith("+"):
            op = "add"
        elif line.startswith("-"):
            op = "del"
        else:
            op = "ctx"
        rows.append({"op": op, "text": line})
    return rows
