"""Structure-aware chunking: a document's text cut at its sections, never through a code block or a list
item when it can be helped, each chunk at most `max_tokens` (tiktoken cl100k_base, as the context block
counts).

The text is read as Markdown: ATX headings (`## Install`) and setext/reStructuredText headings (a line
underlined with `===`, `---`, `~~~`...) open sections; fenced code blocks, lists and paragraphs are
blocks. Blocks of one section are packed together up to the bound; a chunk never spans two sections, so
its heading path says where it came from. A block over the bound is split at its natural joints (list
items, code lines, sentences) and, as a last resort, at token boundaries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory_admin.tokens import count_tokens, encoding

DEFAULT_MAX_TOKENS = 400

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^\s{0,6}(?:[-*+•]|\d{1,3}[.)])\s+")
_UNDERLINE = re.compile(r"^ {0,3}([=\-~^*+#\"'`:.])\1{2,}\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


@dataclass(frozen=True)
class Chunk:
    heading_path: tuple[str, ...]
    text: str
    tokens: int


@dataclass
class _Block:
    kind: str  # heading, code, list, para
    text: str
    level: int = 0


class _Reader:
    """Reads lines into blocks; one method per kind of line."""

    def __init__(self, text: str):
        self.lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.blocks: list[_Block] = []
        self.underline_levels: list[str] = []  # setext/rst: the first underline character is level 1, ...
        self.para: list[str] = []
        self.items: list[str] = []
        self.i = 0

    def flush(self) -> None:
        if self.para:
            self.blocks.append(_Block("para", " ".join(s.strip() for s in self.para)))
            self.para.clear()
        if self.items:
            self.blocks.append(_Block("list", "\n".join(self.items)))
            self.items.clear()

    def fence(self, marker: str) -> None:
        self.flush()
        body = [self.lines[self.i]]
        self.i += 1
        close = marker[0] * len(marker)
        while self.i < len(self.lines) and not self.lines[self.i].lstrip().startswith(close):
            body.append(self.lines[self.i])
            self.i += 1
        body.append(self.lines[self.i] if self.i < len(self.lines) else marker)
        self.blocks.append(_Block("code", "\n".join(body)))
        self.i += 1

    def heading(self, text: str, level: int, consumed: int) -> None:
        self.flush()
        self.blocks.append(_Block("heading", text.strip(), level=level))
        self.i += consumed

    def setext(self) -> bool:
        line = self.lines[self.i]
        under = _UNDERLINE.match(self.lines[self.i + 1]) if self.i + 1 < len(self.lines) else None
        if not (under and line.strip() and not _UNDERLINE.match(line) and not self.para and not self.items):
            return False
        char = under.group(1)
        if char not in self.underline_levels:
            self.underline_levels.append(char)
        self.heading(line, min(6, self.underline_levels.index(char) + 1), 2)
        return True

    def text_line(self, line: str) -> None:
        if not line.strip():
            self.flush()
        elif _LIST_ITEM.match(line):
            if self.para:
                self.flush()
            self.items.append(line.rstrip())
        elif self.items and line.startswith((" ", "\t")):
            self.items[-1] += " " + line.strip()  # a continuation of the item
        else:
            if self.items:
                self.flush()
            self.para.append(line)
        self.i += 1

    def read(self) -> list[_Block]:
        while self.i < len(self.lines):
            line = self.lines[self.i]
            fence = _FENCE.match(line)
            atx = _ATX.match(line)
            if fence:
                self.fence(fence.group(1))
            elif atx:
                self.heading(atx.group(2), len(atx.group(1)), 1)
            elif self.setext():
                pass
            elif _UNDERLINE.match(line):
                self.flush()  # a thematic break, or a reStructuredText overline
                self.i += 1
            else:
                self.text_line(line)
        self.flush()
        return self.blocks


def _blocks(text: str) -> list[_Block]:
    return _Reader(text).read()


def _split_oversized(block: _Block, max_tokens: int) -> list[str]:
    """Pieces of one block, each within the bound: at items, lines or sentences, else at tokens."""
    if block.kind == "list":
        parts = block.text.split("\n")
    elif block.kind == "code":
        parts = block.text.split("\n")
    else:
        parts = _SENTENCE_END.split(block.text)
    joiner = " " if block.kind == "para" else "\n"
    out: list[str] = []
    current: list[str] = []
    current_tokens = 0
    for part in parts:
        n = count_tokens(part) + 1
        if n > max_tokens:
            if current:
                out.append(joiner.join(current))
                current, current_tokens = [], 0
            out.extend(_token_slices(part, max_tokens))
            continue
        if current and current_tokens + n > max_tokens:
            out.append(joiner.join(current))
            current, current_tokens = [], 0
        current.append(part)
        current_tokens += n
    if current:
        out.append(joiner.join(current))
    return out


def _token_slices(text: str, max_tokens: int) -> list[str]:
    ids = encoding().encode(text, disallowed_special=())
    return [encoding().decode(ids[i : i + max_tokens]) for i in range(0, len(ids), max_tokens)]


def _enter(path: list[tuple[int, str]], heading: _Block) -> None:
    while path and path[-1][0] >= heading.level:
        path.pop()
    path.append((heading.level, heading.text))


class _Packer:
    """Packs the blocks of one section into chunks up to the bound."""

    def __init__(self, max_tokens: int, title: str):
        self.max_tokens = max_tokens
        self.chunks: list[Chunk] = []
        self.path: list[tuple[int, str]] = [(0, title)] if title else []
        self.pending: list[str] = []
        self.pending_tokens = 0

    def emit(self) -> None:
        body = "\n\n".join(self.pending).strip()
        if body:
            path = tuple(h[:300] for _, h in self.path if h)
            self.chunks.append(Chunk(path, body, count_tokens(body)))
        self.pending.clear()
        self.pending_tokens = 0

    def add(self, block: _Block) -> None:
        if block.kind == "heading":
            self.emit()
            _enter(self.path, block)
            return
        n = count_tokens(block.text) + 2
        if n > self.max_tokens:
            self.emit()
            for piece in _split_oversized(block, self.max_tokens - 2):
                self.pending.append(piece)
                self.emit()
            return
        if self.pending_tokens + n > self.max_tokens:
            self.emit()
        self.pending.append(block.text)
        self.pending_tokens += n


def chunk_text(text: str, *, max_tokens: int = DEFAULT_MAX_TOKENS, title: str = "") -> list[Chunk]:
    """The chunks of a document, in order. `title` heads the path of text before its first heading."""
    if max_tokens < 16:
        raise ValueError("max_tokens must be at least 16")
    packer = _Packer(max_tokens, title)
    for block in _blocks(text):
        packer.add(block)
    packer.emit()
    return _bounded(packer.chunks, max_tokens)


def _bounded(chunks: list[Chunk], max_tokens: int) -> list[Chunk]:
    """A chunk whose exact count (joins included) went over the bound is cut again at token boundaries."""
    bounded: list[Chunk] = []
    for chunk in chunks:
        if chunk.tokens <= max_tokens:
            bounded.append(chunk)
        else:
            bounded.extend(
                Chunk(chunk.heading_path, piece, count_tokens(piece)) for piece in _token_slices(chunk.text, max_tokens)
            )
    return bounded
