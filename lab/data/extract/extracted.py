"""What an extraction gives (:class:`Extracted`: text, title, headings, meta), the limits a file is read within
(:class:`Limits`), why a file is refused (:class:`Unreadable`), and the normalisation every format shares."""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable

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


def assemble(blocks: Iterable[Block]) -> tuple[str, list[Heading], list[int]]:
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
