"""lab.data.extract.pdf: pages, running heads, dehyphenation and outline headings; a real PDF; encryption.

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, or
copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

from pathlib import Path

import pytest
from docwriters import RAW, encrypted_pdf

from lab.data.extract import Unreadable, extract


def _pdf_with_pages(path: Path) -> Path:
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path))
    for n in range(4):
        c.setFont("Helvetica", 8)
        c.drawString(72, 800, "Guide to the Widget")  # running head
        c.bookmarkPage(f"p{n}")
        c.addOutlineEntry(f"Part {n + 1}", f"p{n}", level=0)
        c.setFont("Helvetica", 11)
        for i, line in enumerate([f"Part {n + 1}", "The result is a hyphen-", "ated word; a well-",
                                  "known form stays well-known."]):
            c.drawString(72, 760 - 16 * i, line)
        c.drawString(300, 40, str(n + 1))  # page number
        c.showPage()
    c.save()
    return path


def test_pdf_pages_running_heads_dehyphenation_and_outline_headings(tmp_path):
    got = extract(_pdf_with_pages(tmp_path / "g.pdf").read_bytes(), "pdf")
    assert got.meta["pages"] == 4 and len(got.meta["page_offsets"]) == 4
    offsets = got.meta["page_offsets"]
    pages = [got.text[a:b].strip() for a, b in zip(offsets, offsets[1:] + [None], strict=True)]
    assert pages[1] == "Part 2\nThe result is a\nhyphenated word; a\nwell-known form stays well-known."
    assert "Guide to the Widget" not in got.text and "\n3\n" not in got.text
    assert [h["title"] for h in got.headings] == ["Part 1", "Part 2", "Part 3", "Part 4"]
    assert all(h["found"] and got.text[h["start"]:h["end"]] == h["title"] for h in got.headings)
    assert got.title == "Part 1"


def test_real_pdf_from_the_asymptote_folder():
    got = extract((RAW / "CAD.pdf").read_bytes(), "pdf")
    assert got.meta["pages"] == 7 and got.title is None  # no outline, no Title: the caller uses the stem
    assert "The package CAD.asy provides basic pen definitions" in got.text


def test_encrypted_pdf_is_unreadable_unless_the_empty_password_opens_it(tmp_path):
    with pytest.raises(Unreadable) as info:
        extract(encrypted_pdf(tmp_path / "locked.pdf", "secret").read_bytes(), "pdf")
    assert info.value.kind == "encrypted" and "password" in info.value.reason
    assert "nobody may read" in extract(encrypted_pdf(tmp_path / "owner.pdf", "").read_bytes(), "pdf").text
