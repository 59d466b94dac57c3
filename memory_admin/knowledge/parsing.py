"""What a fetched or uploaded document says, as Markdown-shaped text the chunker reads structure from.

HTML becomes headings (`#`), list items (`- `), fenced code blocks and paragraphs, with its title and the
links it holds (the crawler follows them); scripts, styles, navigation chrome and forms are left out.
PDF goes through pypdf (its text, page by page). Markdown and plain text are read as they are.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin

from memory_admin.knowledge.errors import KnowledgeError

# What each accepted type is called, by the media types and file endings that name it.
MEDIA_TYPES = {
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/plain": "text",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
}
SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".rst": "text", ".html": "html"}
SUFFIXES |= {".htm": "html", ".pdf": "pdf"}


@dataclass
class Parsed:
    text: str
    title: str = ""
    links: list[str] = field(default_factory=list)


def doc_type(*, name: str = "", media_type: str = "") -> str | None:
    """`markdown`, `text`, `html`, `pdf`, or None when neither the media type nor the name says."""
    kind = MEDIA_TYPES.get(media_type.split(";")[0].strip().lower())
    if kind:
        return kind
    lowered = name.lower().split("?")[0]
    for suffix, kind in SUFFIXES.items():
        if lowered.endswith(suffix):
            return kind
    return None


def parse(body: bytes, kind: str, *, base_url: str = "", charset: str = "") -> Parsed:
    if kind == "pdf":
        return _pdf(body)
    text = _decode(body, charset)
    if kind == "html":
        return html_to_text(text, base_url=base_url)
    title = next((m.group(1).strip() for m in re.finditer(r"(?m)^#\s+(.+)$", text)), "") if kind == "markdown" else ""
    return Parsed(text=text, title=title[:500])


def _decode(body: bytes, charset: str) -> str:
    if b"\x00" in body[:8192]:
        raise KnowledgeError("The file is binary, not text.", code="unreadable_document")
    for encoding in (charset, "utf-8"):
        if encoding:
            try:
                return body.decode(encoding)
            except (LookupError, UnicodeDecodeError):
                continue
    return body.decode("latin-1")


def _pdf(body: bytes) -> Parsed:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        pages = [page.extract_text() or "" for page in reader.pages]
        title = str((reader.metadata or {}).get("/Title") or "")
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise KnowledgeError("The PDF could not be read.", code="unreadable_document") from exc
    return Parsed(text="\n\n".join(p.strip() for p in pages if p.strip()), title=title[:500])


_SKIPPED = {"script", "style", "noscript", "template", "svg", "nav", "footer", "form", "button", "select", "iframe"}
_BLOCKS = {"p", "div", "section", "article", "main", "header", "blockquote", "table", "tr", "dl", "dt", "dd", "br"}
_VOID = {"br", "img", "hr", "meta", "link", "input", "source", "wbr", "area", "base", "col", "embed", "track"}


class _HtmlText(HTMLParser):
    def __init__(self, base_url: str):
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.out: list[str] = []
        self.links: list[str] = []
        self.title = ""
        self._skip = 0
        self._pre = 0
        self._in_title = False
        self._lists: list[str] = []

    def _newline(self, blank: bool = True) -> None:
        self.out.append("\n\n" if blank else "\n")

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _SKIPPED:
            self._skip += 1
            return
        if tag in ("a", "base"):
            self._href(tag, dict(attrs).get("href"))
        if self._skip:
            return
        if tag == "title":
            self._in_title = True
        elif re.fullmatch(r"h[1-6]", tag):
            self._newline()
            self.out.append("#" * int(tag[1]) + " ")
        elif tag in ("ul", "ol", "li"):
            self._list_start(tag)
        elif tag == "pre":
            self._pre += 1
            self._newline()
            self.out.append("```\n")
        elif tag in _BLOCKS:
            self._newline(blank=tag != "br")

    def _href(self, tag: str, href: str | None) -> None:
        if not href:
            return
        if tag == "base":
            self.base_url = urljoin(self.base_url, href)
        else:
            self.links.append(urldefrag(urljoin(self.base_url, href.strip()))[0])

    def _list_start(self, tag: str) -> None:
        if tag == "li":
            self._newline(blank=False)
            self.out.append("  " * max(0, len(self._lists) - 1) + ("1. " if self._lists[-1:] == ["ol"] else "- "))
        else:
            self._lists.append(tag)
            self._newline(blank=len(self._lists) == 1)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if tag == "title":
            self._in_title = False
        elif re.fullmatch(r"h[1-6]", tag):
            self._newline()
        elif tag in ("ul", "ol"):
            if self._lists:
                self._lists.pop()
            self._newline(blank=not self._lists)
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
            self.out.append("\n```")
            self._newline()
        elif tag in _BLOCKS:
            self._newline()

    def handle_startendtag(self, tag: str, attrs) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        if self._skip:
            return
        self.out.append(data if self._pre else re.sub(r"\s+", " ", data))


def html_to_text(html: str, *, base_url: str = "") -> Parsed:
    parser = _HtmlText(base_url)
    parser.feed(html)
    parser.close()
    text = "".join(parser.out)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    links = list(dict.fromkeys(link for link in parser.links if link.startswith(("http://", "https://"))))
    return Parsed(text=text, title=re.sub(r"\s+", " ", parser.title).strip()[:500], links=links)
