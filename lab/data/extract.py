"""Text extraction from document files: one small extractor per format, each a pure function of the file's bytes.

Every extractor returns an :class:`Extracted` (normalised text, title, headings, format-specific metadata) or
raises :class:`Unreadable` with a reason a user can act on. Nothing here downloads anything or touches a model.

Libraries (maintained, offline, permissive licences), and why:
- PDF: ``pypdf`` (BSD-3-Clause, pure Python, no system libraries). Its text extraction keeps reading order well
  enough for retrieval, reads the outline (bookmarks) for headings, and tells an encrypted file from a corrupt one.
  pdfminer.six gives finer layout control but is several times slower; PyMuPDF is AGPL.
- DOCX: ``python-docx`` (MIT): paragraphs, their styles (Heading 1..9, Title) and tables in body order.
- HTML: ``lxml`` (BSD-3-Clause) with explicit removal of navigation, headers, footers, sidebars, scripts and
  styles (HTML5 elements, ARIA roles, and the class/id names documentation generators use: Sphinx, MkDocs,
  texinfo, DocBook), in-page tables of contents among them (class or id word "toc" or
  "tableofcontents"). For documentation pages this is more predictable than a news-article extractor such as
  trafilatura, which may drop short reference pages as boilerplate.
- Text encodings: ``charset-normalizer`` (MIT) when a file is neither valid UTF-8 nor marked by a byte-order mark.
  Its guess is low-confidence when another encoding fits the bytes about as well (chaos within 0.1) and reads
  them as different text; such a guess is kept and recorded in ``meta["encoding_guess"]`` (encoding chosen,
  the alternatives and how each reads the first differing word) so the ingest report can list it.

Limits (:class:`Limits`, defaults stated there): a DOCX is checked from its zip directory alone, before anything
is decompressed (the compression ratio of every member over 1 MiB, the total uncompressed size, and the XML
parts' size against 5 x the text limit); a PDF above
its page limit is refused after its page tree is read, before any page's text; a document whose extracted text
is above the text limit is refused. File sizes are checked by the caller before reading (``Limits.max_bytes``).
pypdf bounds each decompressed stream itself (``pypdf.filters.ZLIB_MAX_OUTPUT_LENGTH``).

Conventions
- Text is normalised the same way for every format (:func:`normalise`): Unicode NFC, Latin ligatures
  (U+FB00-FB06) spelled out, soft hyphens and zero-width spaces removed, other control characters and every kind
  of horizontal space become one space, lines stripped, at most one blank line between paragraphs.
- Markdown, reStructuredText and plain text are kept as text (markup included); only whitespace is normalised.
- ``headings``: a list of ``{"level", "title", "start", "end"}`` in text order; ``start``/``end`` are Python
  string offsets into the normalised text (end exclusive, as evidence spans). For markdown, reStructuredText,
  text, HTML and DOCX, ``text[start:end]`` is the heading's line as it appears in the text (markdown keeps its
  ``#`` marks; the underline of an underlined heading is dropped). PDF headings are the outline entries
  (bookmarks); their span is where the title is found on its page, or the empty span at the page start when it
  is not found (``"found": false``).
- Title: the first heading, else the HTML ``<title>`` (PDF: the Title in the document information, markdown:
  ``title:`` in front matter), else ``None`` (the caller uses the file stem).
- PDF pages are separated by a blank line; ``page_offsets`` gives each page's start offset in the text. Lines
  repeated at the top or bottom of pages (running heads, page numbers) are dropped, and a word hyphenated
  across a line or page break is joined (the hyphen is kept when the hyphenated form occurs elsewhere in the
  document, as in "well-known"). Dot leaders of tables of contents become " ... ".
"""
from __future__ import annotations

import io
import logging
import re
import unicodedata
import zipfile
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import lxml.html
from charset_normalizer import from_bytes
from lxml import etree

if TYPE_CHECKING:  # types only: the packages are imported where used (module docstring)
    from charset_normalizer import CharsetMatch
    from docx.text.paragraph import Paragraph
    from pypdf import PdfReader

#: Bump when extraction output changes, so `lab ingest` re-reads files it would otherwise reuse.
EXTRACTOR_VERSION = 2

#: Extension (lower case, with dot) -> format name.
FORMATS = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".txt": "text",
           ".html": "html", ".htm": "html", ".pdf": "pdf", ".docx": "docx"}


MB = 1024 * 1024
XML_PER_TEXT = 5  # a DOCX's XML parts may inflate to this many times --max-text-mb


@dataclass(frozen=True)
class Limits:
    """Bounds on what one file may cost, so a hostile file (a zip bomb, a huge page) is refused in seconds and in
    bounded memory. Sizes in MiB; the defaults are far above ordinary documentation and far below a machine."""

    max_text_mb: float = 20.0  # .md .rst .txt .html files, and the text extracted from any file
    max_pdf_mb: float = 200.0  # PDF file size
    max_pdf_pages: int = 2000
    max_docx_mb: float = 100.0  # DOCX file size
    max_unzipped_mb: float = 200.0  # DOCX: sum of the uncompressed sizes in its zip directory
    max_zip_ratio: float = 100.0  # DOCX: uncompressed / compressed size of any member over 1 MiB

    def max_bytes(self, fmt: str) -> int:
        """The largest file of format ``fmt`` read at all (bytes)."""
        mb = {"pdf": self.max_pdf_mb, "docx": self.max_docx_mb}.get(fmt, self.max_text_mb)
        return int(mb * MB)


class Unreadable(Exception):
    """A file that cannot be read as a document; ``kind`` is a short stable key, the message the reason."""

    def __init__(self, kind: str, reason: str):
        self.kind, self.reason = kind, reason
        super().__init__(reason)


#: A heading of an extracted text: ``{"level", "title", "start", "end"}`` (character offsets).
Heading = dict[str, Any]
#: A block of text before assembly: ``(text, heading level or None[, heading title])``.
Block = tuple[str, int | None] | tuple[str, int | None, str | None]


@dataclass
class Extracted:
    text: str
    title: str | None = None
    headings: list[Heading] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- normalisation

_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st"})
_REMOVE = re.compile("[\u00ad\u200b\u2060\ufeff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
_HSPACE = re.compile(r"[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")
_BLANKS = re.compile(r"\n{3,}")


def normalise(text: str) -> str:
    """Whitespace-normalised text (see the module conventions); idempotent."""
    text = unicodedata.normalize("NFC", text).translate(_LIGATURES)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n\n")
    text = _CONTROL.sub(" ", _REMOVE.sub("", text))
    text = "\n".join(_HSPACE.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANKS.sub("\n\n", text).strip()


def _assemble(blocks: Iterable[Block]) -> tuple[str, list[Heading], list[int]]:
    """Join blocks ``(text, heading level or None[, heading title])`` with blank lines; return the text, the
    headings (offsets of their blocks) and each block's start offset (an empty block: where the next would start).
    """
    parts: list[str] = []
    headings: list[Heading] = []
    offsets: list[int] = []
    pos = 0
    for raw, level, *rest in blocks:
        block = normalise(raw)
        if level is not None:
            block = " ".join(block.split())  # a heading is one line
        start = pos + 2 if parts else pos
        offsets.append(start)
        if not block:
            continue
        if level is not None:
            title = " ".join((rest[0] if rest and rest[0] else block).split())
            headings.append({"level": level, "title": title, "start": start, "end": start + len(block)})
        parts.append(block)
        pos = start + len(block)
    return "\n\n".join(parts), headings, [min(o, pos) for o in offsets]


# ------------------------------------------------------------------------------------------------- text files

_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def decode_text(data: bytes) -> tuple[str, str, dict[str, Any] | None]:
    """(text, encoding name, low-confidence guess or None): a byte-order mark, else strict UTF-8, else
    charset-normalizer's best guess (windows-1252 preferred when it fits as well). The guess is a dict
    ``{"encoding", "alternatives": [{"encoding", "reads"}], "reads"}`` when other encodings fit about as well and
    read the bytes differently (``reads``: the first word where they differ, as each encoding reads it).
    Raises Unreadable for binary data (NUL bytes without a UTF-16/32 mark) and for bytes no encoding fits."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(encoding.replace("-sig", "")), encoding, None
            except UnicodeDecodeError:
                raise Unreadable("undecodable", f"starts with a {encoding} byte-order mark but is not "
                                 f"{encoding}") from None
    if b"\x00" in data[:8192]:
        raise Unreadable("binary", "binary file (contains NUL bytes), not text")
    try:
        return data.decode("utf-8"), "utf-8", None
    except UnicodeDecodeError:
        pass

    matches = list(from_bytes(data))
    best = matches[0] if matches else None
    if best is None:
        raise Unreadable("undecodable", "no text encoding fits its bytes (not UTF-8; charset detection failed)")
    encoding, text = best.encoding, str(best)
    # short Western texts fit several single-byte code pages equally well; prefer windows-1252, the most common
    # legacy one (the WHATWG fallback), when it fits about as well as the first guess
    for m in matches:
        if "cp1252" in (m.encoding, *m.could_be_from_charset) and m.chaos <= best.chaos + 0.1 \
                and m.coherence >= best.coherence:
            try:
                encoding, text = "cp1252", data.decode("cp1252")
            except UnicodeDecodeError:
                continue
            break
    bad = sum(1 for ch in text if unicodedata.category(ch) in ("Cc", "Co", "Cn") and ch not in "\n\r\t\f")
    if bad > max(2, len(text) // 100):
        raise Unreadable("undecodable", f"decodes as {encoding} only with {bad} control or unassigned "
                         "characters: probably not text")
    return text, encoding, _ambiguity(data, text, encoding, matches, best)


def _ambiguity(data: bytes, text: str, encoding: str, matches: list[CharsetMatch], best: CharsetMatch
               ) -> dict[str, Any] | None:
    """The low-confidence record of a detected encoding (see decode_text), or None when no other encoding that
    fits about as well reads the bytes differently."""
    alternatives: list[dict[str, Any]] = []
    for m in matches:
        if m.chaos > best.chaos + 0.1 or m.encoding == encoding:
            continue
        try:
            other = data.decode(m.encoding)
        except (UnicodeDecodeError, LookupError):
            continue
        if other != text and all(a["encoding"] != m.encoding for a in alternatives):
            alternatives.append({"encoding": m.encoding, "reads": _first_difference(other, text)})
    if not alternatives:
        return None
    reads = _first_difference(text, data.decode(alternatives[0]["encoding"]))
    return {"encoding": encoding, "reads": reads, "alternatives": alternatives[:3]}


def _first_difference(text: str, other: str) -> str:
    """The word of ``text`` around the first character where it differs from ``other`` (at most 40 chars)."""
    i = next((k for k, (a, b) in enumerate(zip(text, other, strict=False)) if a != b), min(len(text), len(other)))
    lo, hi = i, i
    while lo > 0 and not text[lo - 1].isspace() and i - lo < 20:
        lo -= 1
    while hi < len(text) and not text[hi].isspace() and hi - i < 20:
        hi += 1
    return text[lo:hi]


_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+_:.<>])\1{2,}$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def _lines(raw: str) -> list[str]:
    return unicodedata.normalize("NFC", raw).replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _underlined(lines: list[str], skip: set[int], markdown: bool = False,
                tight: bool = False) -> dict[int, tuple[str, list[int]]]:
    """Title line index -> (adornment style, adornment line indices) for lines underlined by a run of one
    punctuation character at least as wide as the title (markdown setext: any run of ``=`` or ``-``; ``tight``,
    for plain text: at most 3 characters wider, so separator lines under code are not taken for underlines),
    optionally overlined by the same run; the title starts a paragraph."""
    found: dict[int, tuple[str, list[int]]] = {}
    for i in range(len(lines) - 1):
        title, under = lines[i].strip(), lines[i + 1].strip()
        if i in skip or i + 1 in skip or not title or _UNDERLINE.match(title) or not _UNDERLINE.match(under):
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        if markdown:
            if under[0] not in "=-" or indent > 3:
                continue
        elif indent or len(under) < _width(title) or (tight and len(under) > _width(title) + 3):
            continue
        over = i > 0 and lines[i - 1].strip() == under
        if i > (1 if over else 0) and lines[i - 2 if over else i - 1].strip():
            continue  # not at the start of a paragraph
        found[i] = (("over" if over else "") + under[0], [i - 1, i + 1] if over else [i + 1])
    return found


def _line_blocks(lines: list[str], headings: dict[int, tuple[int, str]], drop: set[int]) -> list[Block]:
    """Blocks of a text file: heading lines alone, other lines grouped into paragraphs at blank lines."""
    blocks: list[Block] = []
    buf: list[str] = []
    for i, line in enumerate(lines):
        if i in headings:
            if buf:
                blocks.append(("\n".join(buf), None))
                buf = []
            level, title = headings[i]
            blocks.append((line, level, title))
        elif i in drop:
            continue
        elif not line.strip():
            if buf:
                blocks.append(("\n".join(buf), None))
                buf = []
        else:
            buf.append(line)
    if buf:
        blocks.append(("\n".join(buf), None))
    return blocks


def _fenced(lines: list[str]) -> set[int]:
    inside, fence, out = False, "", set()
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if m and (not inside or m.group(1).startswith(fence)):
            inside, fence = (not inside), m.group(1)[:3]
            out.add(i)
        elif inside:
            out.add(i)
    return out


def extract_markdown(data: bytes) -> Extracted:
    """Markdown kept as text (``#`` marks included); headings: ATX (``# Title``) and setext (underlined by
    ``===`` or ``---``, the underline dropped) outside fenced code and front matter; title also from ``title:``
    in YAML front matter."""
    raw, encoding, guess = decode_text(data)
    lines = _lines(raw)
    skip = _fenced(lines)
    front_title = None
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
        if end is not None:
            skip.update(range(end + 1))
            for line in lines[1:end]:
                m = re.match(r"^title:\s*(.+)$", line.strip())
                if m:
                    front_title = m.group(1).strip().strip("\"'") or None
    heads: dict[int, tuple[int, str]] = {}
    for i, line in enumerate(lines):
        m = _ATX.match(line)
        if i not in skip and m and (m.group(2) or "").strip():
            heads[i] = (len(m.group(1)), m.group(2).strip())
    drop: set[int] = set()
    for i, (style, adornment) in _underlined(lines, skip | set(heads), markdown=True).items():
        heads[i] = (1 if style == "=" else 2, lines[i].strip())
        drop.update(adornment)
    text, headings, _ = _assemble(_line_blocks(lines, heads, drop))
    return Extracted(text, headings[0]["title"] if headings else front_title, headings,
                     {"encoding": encoding, "encoding_guess": guess})


def extract_rst(data: bytes, tight: bool = False) -> Extracted:
    """reStructuredText kept as text; headings: section titles (underlined, optionally overlined, adornment
    lines dropped), levels in the order their adornment styles first appear (as docutils does)."""
    raw, encoding, guess = decode_text(data)
    lines = _lines(raw)
    styles: list[str] = []
    heads: dict[int, tuple[int, str]] = {}
    drop: set[int] = set()
    for i, (style, adornment) in sorted(_underlined(lines, set(), tight=tight).items()):
        if style not in styles:
            styles.append(style)
        heads[i] = (styles.index(style) + 1, lines[i].strip())
        drop.update(adornment)
    text, headings, _ = _assemble(_line_blocks(lines, heads, drop))
    return Extracted(text, headings[0]["title"] if headings else None, headings,
                     {"encoding": encoding, "encoding_guess": guess})


def extract_text(data: bytes) -> Extracted:
    """Plain text; headings are lines underlined (optionally overlined) by a run of ``=``, ``-``, ``~`` etc. at
    least as wide (and at most 3 wider), as in reStructuredText."""
    return extract_rst(data, tight=True)


# ------------------------------------------------------------------------------------------------------- HTML

_DROP_TAGS = {"script", "style", "noscript", "template", "nav", "footer", "aside", "form", "button", "iframe",
              "svg", "canvas", "select", "textarea", "object", "embed", "head", "menu", "dialog"}
_DROP_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary", "menu", "menubar"}
#: class/id words (split on space, "-", "_") that mark navigation in documentation generators' output.
_NAV_WORDS = {"nav", "navbar", "navigation", "navheader", "navfooter", "breadcrumb", "breadcrumbs", "sidebar",
              "sphinxsidebar", "sphinxsidebarwrapper", "related", "footer", "menu", "toolbar", "skip", "skiplink",
              "topbar", "sidenav", "pagination", "prevnext", "headerlink", "copiable", "banner", "cookie", "toc",
              "tableofcontents"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = {"p", "div", "section", "article", "main", "body", "li", "ul", "ol", "dl", "dt", "dd", "table", "thead",
           "tbody", "tfoot", "tr", "blockquote", "pre", "figure", "figcaption", "caption", "hr", "address",
           "details", "summary", "center", "fieldset", "legend", "header"}
_CELLS = {"td", "th"}
_SPACE = re.compile(r"\s+")  # HTML source line breaks are spaces; only <br> and block ends break lines
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def _words(value: str | None) -> set[str]:
    return {w for w in re.split(r"[\s_\-]+", (value or "").lower()) if w}


def _has_heading(el: Any) -> bool:  # an lxml element (lxml ships no types)
    return any(d.tag in _HEADINGS for d in el.iter() if isinstance(d.tag, str))


def _is_boilerplate(el: Any) -> bool:
    tag = el.tag.lower() if isinstance(el.tag, str) else ""
    if tag in _DROP_TAGS or (el.get("role") or "").lower() in _DROP_ROLES or el.get("hidden") is not None:
        return True
    if "display:none" in (el.get("style") or "").replace(" ", "").lower():
        return True
    if tag in ("main", "article", "section", "body"):
        return False
    classes, ids = _words(el.get("class")), _words(el.get("id"))
    if classes & _NAV_WORDS:
        return True
    # ids are often slugs of a section's own heading (Sphinx: <div id="navigation"> around "Navigation"), so an
    # id counts only on an element without headings; a header is navigation unless it holds a heading
    # (texinfo "header" divs are Next/Previous/Up links; an <article><header><h1> is content)
    if ids & _NAV_WORDS or tag == "header" or "header" in classes | ids:
        return not _has_heading(el)
    return False


def _html_decode(data: bytes) -> tuple[str, str, dict[str, Any] | None]:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(encoding.replace("-sig", ""), errors="replace"), encoding, None
    m = _META_CHARSET.search(data[:4096])
    if m:
        name = m.group(1).decode("ascii").lower()
        try:
            return data.decode(name), name, None
        except (LookupError, UnicodeDecodeError):
            pass  # a wrong declaration: detect instead
    return decode_text(data)


def extract_html(data: bytes) -> Extracted:
    """HTML without navigation, headers, footers, sidebars, scripts and styles; headings from h1-h6; title the
    first heading, else ``<title>``. Encoding: byte-order mark, ``<meta charset>``, UTF-8, detection."""
    raw, encoding, guess = _html_decode(data)
    raw = re.sub(r"^\s*<\?xml[^>]*\?>", "", raw)  # lxml refuses str input with an encoding declaration
    if not raw.strip():
        raise Unreadable("empty", "empty file (no text)")
    try:
        root = lxml.html.document_fromstring(raw)
    except (etree.ParserError, ValueError) as exc:
        raise Unreadable("corrupt", f"not parseable as HTML ({exc})") from None
    page_title = None
    title_el = root.find(".//title")
    if title_el is not None and title_el.text_content().strip():
        page_title = " ".join(title_el.text_content().split())
    for el in list(root.iter()):
        if el.getparent() is not None and isinstance(el.tag, str) and _is_boilerplate(el):
            el.drop_tree()
    blocks: list[tuple[str, int | None]] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            blocks.append(("".join(buf), None))
            buf.clear()

    def walk(el: Any) -> None:
        tag = el.tag.lower() if isinstance(el.tag, str) else ""
        if tag in _HEADINGS or tag == "pre":  # one block of the element's whole text (a heading has a level)
            flush()
            blocks.append((el.text_content(), _HEADINGS.get(tag)))
        elif tag == "br":
            buf.append("\n")
        elif tag:  # comments and processing instructions have no str tag: only their tail counts
            block = tag in _BLOCKS
            if block:
                flush()
            if tag in _CELLS:
                buf.append(" ")
            if el.text:
                buf.append(_SPACE.sub(" ", el.text))
            for child in el:
                walk(child)
            if block:
                flush()
            elif tag in _CELLS:
                buf.append(" ")
        if el.tail:
            buf.append(_SPACE.sub(" ", el.tail))

    body = root.find("body")
    walk(body if body is not None else root)
    flush()
    text, headings, _ = _assemble(blocks)
    return Extracted(text, headings[0]["title"] if headings else page_title, headings,
                     {"encoding": encoding, "html_title": page_title, "encoding_guess": guess})


# ------------------------------------------------------------------------------------------------------- DOCX

def check_zip(data: bytes, limits: Limits) -> None:
    """Unreadable (kind ``too_large``) when a member over 1 MiB is compressed more than ``limits.max_zip_ratio``
    times, the zip directory declares more than ``limits.max_unzipped_mb`` in all, or its XML parts more than
    ``XML_PER_TEXT`` times the text limit (markup around text); reads the directory only.
    zipfile stops each member at its declared size, so a member cannot inflate past what is checked here."""
    try:
        members = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise Unreadable("corrupt", f"not a valid zip package ({exc})") from None
    for m in members:
        ratio = m.file_size / max(1, m.compress_size)
        if m.file_size > MB and ratio > limits.max_zip_ratio:
            raise Unreadable("too_large", f"zip bomb? {m.filename} inflates {ratio:,.0f} times to "
                             f"{m.file_size / MB:,.0f} MiB (limit {limits.max_zip_ratio:g}x, --max-zip-ratio)")
    total = sum(m.file_size for m in members)
    if total > limits.max_unzipped_mb * MB:
        raise Unreadable("too_large", f"zip bomb? its parts inflate to {total / MB:,.0f} MiB "
                         f"(limit {limits.max_unzipped_mb:g} MiB, --max-unzipped-mb)")
    markup = sum(m.file_size for m in members if m.filename.lower().endswith((".xml", ".rels")))
    if markup > XML_PER_TEXT * limits.max_text_mb * MB:
        raise Unreadable("too_large", f"its XML parts inflate to {markup / MB:,.0f} MiB (limit {XML_PER_TEXT} x "
                         f"{limits.max_text_mb:g} MiB, --max-text-mb)")


def extract_docx(data: bytes, limits: Limits | None = None) -> Extracted:
    """DOCX body in order: paragraphs (styles "Title" and "Heading N", or an outline level, are headings) and
    tables (one line per row, cells joined by " | "). Headers, footers and comments are not body text. The zip
    directory is checked against ``limits`` (:func:`check_zip`) before anything is decompressed."""
    if data.startswith(b"\xd0\xcf\x11\xe0"):
        raise Unreadable("encrypted", "encrypted (password-protected) or legacy binary Word file, not DOCX")
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise Unreadable("corrupt", "not a valid DOCX (not a zip package)")
    check_zip(data, limits or Limits())
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise Unreadable("corrupt", f"not a valid DOCX ({type(exc).__name__}: {exc})") from None
    blocks: list[tuple[str, int | None]] = []
    style_names = {s.style_id: s.name for s in document.styles}
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            for row in item.rows:
                cells: list[str] = []
                for cell in row.cells:
                    value = " ".join(cell.text.split())
                    if not cells or value != cells[-1]:  # merged cells repeat their text
                        cells.append(value)
                blocks.append((" | ".join(cells), None))
            continue
        blocks.append((item.text, _docx_level(item, style_names)))
    text, headings, _ = _assemble(blocks)
    core_title = (document.core_properties.title or "").strip() or None
    return Extracted(text, headings[0]["title"] if headings else core_title, headings, {})


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _docx_level(paragraph: Paragraph, style_names: dict[str, str]) -> int | None:
    """Heading level of a paragraph. The style is looked up by its id in ``style_names`` (id -> name, read once per
    document): python-docx's ``paragraph.style`` scans every style for each paragraph, minutes for a long file."""
    ppr = paragraph.paragraph_format.element.pPr  # the w:p element's properties (public ElementProxy.element)
    style = None if ppr is None else ppr.find(_W + "pStyle")
    name = style_names.get(style.get(_W + "val"), "") if style is not None else ""
    if name == "Title":
        return 1
    m = re.match(r"^Heading (\d)$", name)
    if m:
        return int(m.group(1))
    lvl = None if ppr is None else ppr.find("{http://schemas.openxmlformats.org/wordprocessingml/2006/main}outlineLvl")
    if lvl is not None:
        value = lvl.get("{http://schemas.openxmlformats.org/wordprocessingml/2006/main}val")
        if value is not None and value.isdigit() and int(value) < 9:
            return int(value) + 1
    return None


# -------------------------------------------------------------------------------------------------------- PDF

_PAGE_NUMBER = re.compile(r"[-–—\s]*(\d+|(?=[ivx])x{0,3}(?:ix|iv|v?i{0,3}))[-–—\s]*")


def _running_key(line: str) -> str:
    """A line with its digits masked, lower case: how running heads and feet are compared across pages."""
    return re.sub(r"\d+", "#", line.lower())


def _page_lines(pages: list[str]) -> list[list[str]]:
    """Each page's non-empty lines with running heads/feet removed: the first or last line when the same line
    (digits ignored; at least 5 characters with a letter) is first or last on at least 3 pages ("Chapter 6:
    Programming 36"), and a bare page number (arabic or lower-case roman) among the first or last two."""
    lines = [[ln.strip() for ln in normalise(p).split("\n") if ln.strip()] for p in pages]
    counts: dict[str, int] = {}
    for page in lines:
        for ln in {_running_key(x) for x in page[:1] + page[-1:]}:
            counts[ln] = counts.get(ln, 0) + 1
    running = {k for k, c in counts.items() if c >= 3 and len(k) >= 5 and re.search(r"[^\W\d_]", k)}
    out = []
    for page in lines:
        keep = list(page)
        for idx in (0, -1, 1, -2):
            if len(keep) > abs(idx) and ((idx in (0, -1) and _running_key(keep[idx]) in running)
                                         or _PAGE_NUMBER.fullmatch(keep[idx])):
                keep[idx] = ""
        out.append([x for x in keep if x])
    return out


def _dehyphenate(pages: list[list[str]]) -> list[list[str]]:
    """Join words hyphenated across a line or page break ("exam-" + "ple"); keep the hyphen when the document
    uses the hyphenated form elsewhere."""
    hyphenated = set(re.findall(r"\w+-\w+", "\n".join("\n".join(p) for p in pages)))
    flat = [(pi, li) for pi, p in enumerate(pages) for li in range(len(p))]
    for (pa, la), (pb, lb) in zip(flat, flat[1:], strict=False):
        left, right = pages[pa][la], pages[pb][lb]
        m, n = re.search(r"(\w+)-$", left), re.match(r"^([a-z]\w*)(.*)$", right)
        if not m or not n or not m.group(1)[-1].isalpha():
            continue
        head, tail = m.group(1), n.group(1)
        joined = head + ("-" if f"{head}-{tail}" in hyphenated else "") + tail
        pages[pa][la] = left[: m.start()]
        pages[pb][lb] = joined + n.group(2)
    return [[ln for ln in p if ln.strip()] for p in pages]


_LEADERS = re.compile(r"(?:\s?\.){4,}\s?")  # table-of-contents dot leaders ". . . . ."


def extract_pdf(data: bytes, limits: Limits | None = None) -> Extracted:
    """PDF text page by page (pypdf), running heads and page numbers dropped, hyphenation joined; ``pages`` and
    ``page_offsets`` in meta; headings from the outline. Encrypted files are read when the empty user password
    opens them (owner-only protection), else skipped."""

    import pypdf

    if not data.lstrip()[:5].startswith(b"%PDF"):
        raise Unreadable("corrupt", "not a PDF (no %PDF header)")
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)  # pypdf logs damage it recovers from as warnings: not the user's business here
    try:
        return _read_pdf(data, pypdf, limits or Limits())
    finally:
        logger.setLevel(level)


def _read_pdf(data: bytes, pypdf: ModuleType, limits: Limits) -> Extracted:
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):
                    raise Unreadable("encrypted", "encrypted PDF: needs a password")
            except (FileNotDecryptedError, NotImplementedError, DependencyError) as exc:
                raise Unreadable("encrypted", f"encrypted PDF: cannot be opened ({exc})") from None
        if len(reader.pages) > limits.max_pdf_pages:
            raise Unreadable("too_large", f"{len(reader.pages):,} pages (limit {limits.max_pdf_pages:,}, "
                             "--max-pdf-pages)")
        texts, chars = [], 0
        for page in reader.pages:
            texts.append(page.extract_text() or "")
            chars += len(texts[-1])
            if chars > limits.max_text_mb * MB:
                raise Unreadable("too_large", f"more than {limits.max_text_mb:g} MiB of text by page "
                                 f"{len(texts)} (--max-text-mb)")
        outline = list(_outline(reader))
        info = (reader.metadata or {}).get("/Title")
        info_title = " ".join(normalise(info).split()) or None if isinstance(info, str) else None
    except Unreadable:
        raise
    except FileNotDecryptedError:
        raise Unreadable("encrypted", "encrypted PDF: needs a password") from None
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError,
            AssertionError, ZeroDivisionError, OSError) as exc:
        raise Unreadable("corrupt", f"corrupt PDF ({type(exc).__name__}: {exc})") from None
    pages = [[_LEADERS.sub(" ... ", ln) for ln in p] for p in _dehyphenate(_page_lines(texts))]
    text, _, offsets = _assemble([("\n".join(p), None) for p in pages])
    bounds = offsets + [len(text)]
    headings: list[Heading] = []
    for level, title, page in outline:
        start, end, found = _find_on_page(text, title, bounds[page] if page is not None else 0,
                                          bounds[page + 1] if page is not None else len(text))
        headings.append({"level": level, "title": title, "start": start, "end": end, "found": found})
    headings.sort(key=lambda h: h["start"])
    doc_title = headings[0]["title"] if headings else info_title
    return Extracted(text, doc_title, headings, {"pages": len(texts), "page_offsets": offsets[: len(texts)]})


def _outline(reader: PdfReader) -> Iterator[tuple[int, str, int | None]]:
    def walk(items: Iterable[Any], depth: int) -> Iterator[tuple[int, str, int | None]]:
        for item in items:
            if isinstance(item, list):
                yield from walk(item, depth + 1)
                continue
            title = " ".join(normalise(str(getattr(item, "title", "") or "")).split())
            if not title:
                continue
            try:
                page = reader.get_destination_page_number(item)
            except Exception:  # noqa: BLE001 - a broken bookmark only loses its page
                page = None
            yield depth + 1, title, page if page is not None and 0 <= page < len(reader.pages) else None

    try:
        yield from walk(reader.outline, 0)
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError):
        return


def _find_on_page(text: str, title: str, lo: int, hi: int) -> tuple[int, int, bool]:
    i = text.find(title, lo, hi)
    if i < 0:
        words = [re.escape(w) for w in title.split()]
        m = re.compile(r"\s+".join(words), re.I).search(text, lo, hi) if words else None
        if m:
            return m.start(), m.end(), True
        return lo, lo, False
    return i, i + len(title), True


_SIZE_OPTION = {"pdf": "--max-pdf-mb", "docx": "--max-docx-mb"}

EXTRACTORS: dict[str, Callable[..., Extracted]] = {
    "markdown": extract_markdown, "rst": extract_rst, "text": extract_text,
    "html": extract_html, "pdf": extract_pdf, "docx": extract_docx,
}


def extract(data: bytes, fmt: str, limits: Limits | None = None) -> Extracted:
    """Run the extractor of ``fmt`` on ``data`` within ``limits`` (default :class:`Limits`); Unreadable for empty
    input, a file without text, or one over a limit (kind ``too_large``)."""
    limits = limits or Limits()
    if len(data) > limits.max_bytes(fmt):
        raise Unreadable("too_large", f"{len(data) / MB:,.1f} MiB (limit {limits.max_bytes(fmt) / MB:g} MiB for "
                         f"{fmt}, {_SIZE_OPTION.get(fmt, '--max-text-mb')})")
    if not data.strip():
        raise Unreadable("empty", "empty file" + (" (0 bytes)" if not data else " (whitespace only)"))
    out = EXTRACTORS[fmt](data, limits) if fmt in ("pdf", "docx") else EXTRACTORS[fmt](data)
    if len(out.text) > limits.max_text_mb * MB:
        raise Unreadable("too_large", f"{len(out.text) / MB:,.1f} MiB of text (limit {limits.max_text_mb:g} "
                         "MiB, --max-text-mb)")
    if not out.text.strip():
        what = "no text layer (a scanned PDF? run OCR first)" if fmt == "pdf" else "no text after extraction"
        raise Unreadable("no_text", what)
    return out
