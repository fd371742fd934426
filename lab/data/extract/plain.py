"""Text files: markdown, reStructuredText and plain text, with their encoding detected (:func:`decode_text`) and
their headings (ATX and underlined) found outside code."""
from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Any

from charset_normalizer import from_bytes

if TYPE_CHECKING:  # types only
    from charset_normalizer import CharsetMatch

from lab.data.extract.extracted import Block, Extracted, Unreadable, assemble

BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def decode_text(data: bytes) -> tuple[str, str, dict[str, Any] | None]:
    """(text, encoding name, low-confidence guess or None): a byte-order mark, else strict UTF-8, else
    charset-normalizer's best guess (windows-1252 preferred when it fits as well). The guess is a dict
    ``{"encoding", "alternatives": [{"encoding", "reads"}], "reads"}`` when other encodings fit about as well and
    read the bytes differently (``reads``: the first word where they differ, as each encoding reads it).
    Raises Unreadable for binary data (NUL bytes without a UTF-16/32 mark) and for bytes no encoding fits."""
    for bom, encoding in BOMS:
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
    text, headings, _ = assemble(_line_blocks(lines, heads, drop))
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
    text, headings, _ = assemble(_line_blocks(lines, heads, drop))
    return Extracted(text, headings[0]["title"] if headings else None, headings,
                     {"encoding": encoding, "encoding_guess": guess})


def extract_text(data: bytes) -> Extracted:
    """Plain text; headings are lines underlined (optionally overlined) by a run of ``=``, ``-``, ``~`` etc. at
    least as wide (and at most 3 wider), as in reStructuredText."""
    return extract_rst(data, tight=True)
