"""The names a query holds (SPEC §6): its words as a tsquery, its word n-grams that could name an entity,
and the spans of the proper names in it (the vector component compares the query without them)."""

from __future__ import annotations

import re

from memory_admin.services.entity_draw import COMMON, names

# A word: letters and digits (Unicode), as the keywords, name keys and the context block's words read it.
WORD = re.compile(r"[^\W_]+", re.UNICODE)
MAX_NAME_WORDS = 4


def or_tsquery(text: str) -> str:
    """A raw tsquery matching any word of the text ('a | b | c'); the english configuration stems the
    words and drops stopwords. Only letters and digits get through, so the text cannot inject syntax."""
    words = list(dict.fromkeys(w.lower() for w in WORD.findall(text)))[:64]
    return " | ".join(words)


def name_keys(text: str) -> list[str]:
    """The query's word n-grams (1 to MAX_NAME_WORDS words) in an entity alias's folded form, the ones
    that could name an entity: a single common word ("the", "what") does not."""
    words = [w.casefold() for w in WORD.findall(text[:2000])][:64]
    keys: dict[str, None] = {}
    for size in range(1, MAX_NAME_WORDS + 1):
        for start in range(len(words) - size + 1):
            gram = words[start : start + size]
            if gram[0] in COMMON and (size == 1 or gram[0] != "the"):
                continue
            if gram[-1] in COMMON and size > 1 and gram != ["the", "user"]:
                continue
            keys[" ".join(gram)] = None
    return list(keys)[:256]


def name_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of the proper names the text holds (entity drawing's `names`, possessives with
    them), in order; a name inside a longer one's span is not counted again."""
    spans: list[tuple[int, int]] = []
    for name in sorted(names(text), key=len, reverse=True):
        for m in re.finditer(r"\b" + re.escape(name) + r"(?:['’]s|s['’])?\b", text):
            if not any(m.start() < b and m.end() > a for a, b in spans):
                spans.append(m.span())
    return sorted(spans)


def cut_out(text: str, spans: list[tuple[int, int]]) -> str:
    ends = [0, *(i for span in spans for i in span), len(text)]
    return " ".join(" ".join(text[a:b] for a, b in zip(ends[::2], ends[1::2], strict=True)).split())


def without_names(text: str) -> str:
    """The text with the proper names it holds (`name_spans`) left out."""
    return cut_out(text, name_spans(text))
