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

The package: :mod:`lab.data.extract.extracted` (the result, limits, normalisation), one module per format family
(:mod:`~lab.data.extract.plain`, :mod:`~lab.data.extract.html`, :mod:`~lab.data.extract.docx`,
:mod:`~lab.data.extract.pdf`), and :func:`extract`, which picks the format's extractor.
"""
from __future__ import annotations

from typing import Callable

from lab.data.extract.docx import extract_docx
from lab.data.extract.extracted import EXTRACTOR_VERSION, FORMATS, MB, Extracted, Limits, Unreadable, normalise
from lab.data.extract.html import extract_html
from lab.data.extract.pdf import extract_pdf
from lab.data.extract.plain import extract_markdown, extract_rst, extract_text

__all__ = ["EXTRACTORS", "EXTRACTOR_VERSION", "FORMATS", "Extracted", "Limits", "Unreadable", "extract",
           "normalise"]

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
