"""DOCX: paragraphs, headings and tables by python-docx, after the zip is checked for bombs (:func:`check_zip`)."""
from __future__ import annotations

import io
import re
import zipfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: python-docx is imported where used
    from docx.text.paragraph import Paragraph

from lab.data.extract.extracted import MB, XML_PER_TEXT, Extracted, Limits, Unreadable, assemble


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
    text, headings, _ = assemble(blocks)
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
