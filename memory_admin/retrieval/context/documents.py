"""The context block's documents section (issue 34): the chunks of documents the task is about, each
cited, within a share of the budget (KNOWLEDGE_CONTEXT_SHARE), and marked when it disagrees with the
notebook (the notebook wins).

Which chunks: the search's chunk ranking for the task (`retrieval.chunks`, on the facts' scale), at most
DOCUMENT_CANDIDATES, keeping those that share a word with the task or lie within DOCUMENT_MIN_COSINE of
its meaning (the best of a pool is always rescaled to 1, so the ranking alone would put some document in
every block). The order is the same at every budget; a budget holds a prefix of it, the first chunk that
does not fit cut to fill the share (fill.py), so the block stays monotone in its budget.

Each chunk is one block-written citation line, then its text quoted:

    - [doc 2: Payments runbook; runbook.md; section Payments runbook > Rollback; fetched 2026-11-20]
    > To roll back a payments release, run ...

Disagreement with the notebook, the rule (stated, and tested in tests/knowledge/test_context_documents.py):
a line of the notebook and a line of the chunk both state an attribute as `attribute: value` (a bullet,
bold or not, `:` or `=`), the attributes are the same words (case and punctuation aside), and the values'
words differ. The citation then says `disagrees with the notebook on "<attribute>"`, and the chunk's id is
listed in the section's `contradicts_notebook`. Prose that contradicts without that shape is not caught:
a judge would be needed, and the block is built without an LLM call.
"""

from __future__ import annotations

import re

from memory_admin.retrieval.chunks import ChunkHit
from memory_admin.retrieval.context.render import Item, one_line, quoted

DOCUMENT_CANDIDATES = 8
DOCUMENT_MIN_COSINE = 0.35

# `- **Deploy target:** staging`, `Editor = vim`, `Region: eu-west-1`: an attribute of 1-6 words, a value.
_CLAIM = re.compile(
    r"^\s*(?:[-*+]\s+)?(?:\*\*|__)?(?P<attribute>[^\W\d_][\w ./'()-]{0,60}?)(?:\*\*|__)?\s*[:=]\s*(?:\*\*|__)?"
    r"(?P<value>\S.*?)\s*$"
)
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.casefold() for w in _WORD.findall(text))


def claims(text: str) -> dict[tuple[str, ...], tuple[str, tuple[str, ...]]]:
    """The `attribute: value` lines of a text: {attribute's words: (attribute as written, value's words)}."""
    found = {}
    for line in text.splitlines():
        match = _CLAIM.match(line)
        if not match:
            continue
        attribute = _words(match["attribute"])
        value = _words(match["value"].strip("*_ "))
        if 1 <= len(attribute) <= 6 and value and not match["value"].startswith("//"):  # not a URL's scheme
            found[attribute] = (match["attribute"].strip(), value)
    return found


def disagreement(notebook: dict, chunk_text: str) -> str | None:
    """The first attribute the chunk states with another value than the notebook (module docstring)."""
    for attribute, (_, value) in claims(chunk_text).items():
        stated = notebook.get(attribute)
        if stated is not None and stated[1] != value:
            return stated[0]
    return None


def _cited(text: str) -> str:
    """Stored text inside the block's own bracket: one line, and no bracket of its own to close it with."""
    return one_line(text).replace("[", "(").replace("]", ")")


def document_items(hits: list[ChunkHit], notebook: dict) -> tuple[list[Item], list[str]]:
    """(the documents section's items in order, the ids of those that disagree with the notebook)."""
    chosen = [h for h in hits if h.keyword > 0 or h.cosine >= DOCUMENT_MIN_COSINE][:DOCUMENT_CANDIDATES]
    items, flagged = [], []
    for n, hit in enumerate(chosen, start=1):
        chunk = hit.chunk
        parts = [f"doc {n}: {_cited(chunk.source_name)}", _cited(hit.url or hit.file or "")]
        if hit.section:
            parts.append(f"section {_cited(hit.section)}")
        parts.append(f"fetched {chunk.fetched_at:%Y-%m-%d}")
        against = disagreement(notebook, chunk.content) if notebook else None
        if against is not None:
            parts.append(f'disagrees with the notebook on "{_cited(against)}"; the notebook wins')
            flagged.append(str(chunk.id))
        lead = "- [" + "; ".join(p for p in parts if p) + "]\n"
        items.append(Item(str(chunk.id), lead + quoted(chunk.content.strip()), lead=lead))
    return items, flagged
