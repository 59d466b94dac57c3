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


def side_by_side(theirs: str, mine: str) -> list[dict[str, str]]:
    """Two versions line by line for reading across: `same` lines once on both sides, lines only one
    side has opposite a blank, and changed runs paired up (`changed`)."""
    left, right = theirs.splitlines(), mine.splitlines()
    rows: list[dict[str, str]] = []
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            rows += [{"kind": "same", "theirs": line, "mine": line} for line in left[i1:i2]]
            continue
        ours, theirs_part = right[j1:j2], left[i1:i2]
        for k in range(max(len(ours), len(theirs_part))):
            t = theirs_part[k] if k < len(theirs_part) else None
            m = ours[k] if k < len(ours) else None
            kind = "changed" if t is not None and m is not None else ("theirs" if m is None else "mine")
            rows.append({"kind": kind, "theirs": t or "", "mine": m or ""})
    return rows


def add_their_lines(theirs: str, mine: str) -> str:
    """My text with the lines only theirs has put in where they stand in theirs (after my version of a
    changed run): nothing of mine is dropped, nothing of theirs is lost."""
    left, right = theirs.splitlines(), mine.splitlines()
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=left, b=right, autojunk=False).get_opcodes():
        out += right[j1:j2]
        if op in ("delete", "replace"):
            out += left[i1:i2]
    return "\n".join(out) + ("\n" if mine.endswith("\n") or theirs.endswith("\n") else "")
