"""lab.data.extract.docx: paragraphs, headings, title and tables of a real DOCX (python-docx).

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, or
copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

import io

from lab.data.extract import extract


def _check_offsets(got):
    for h in got.headings:
        if h.get("found", True):
            assert got.text[h["start"]:h["end"]].endswith(h["title"]) or h["title"] in got.text[h["start"]:h["end"]]


def test_docx_paragraphs_headings_title_and_tables(tmp_path):
    import docx

    d = docx.Document()
    d.add_heading("User guide", level=0)  # style "Title"
    d.add_paragraph("First   paragraph.")
    d.add_heading("Install", level=1)
    d.add_paragraph("Second paragraph.")
    d.add_heading("From source", level=2)
    t = d.add_table(rows=1, cols=2)
    t.cell(0, 0).text, t.cell(0, 1).text = "option", "meaning"
    buf = io.BytesIO()
    d.save(buf)
    got = extract(buf.getvalue(), "docx")
    assert got.title == "User guide"
    assert [(h["level"], h["title"]) for h in got.headings] == [(1, "User guide"), (1, "Install"), (2, "From source")]
    assert got.text == ("User guide\n\nFirst paragraph.\n\nInstall\n\nSecond paragraph.\n\nFrom source\n\n"
                        "option | meaning")
    _check_offsets(got)
