"""lab.data.extract: per-format extraction (markdown, rst, text, HTML, DOCX, PDF), encodings, unreadable files.

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, and a
few copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from docwriters import RAW, encrypted_pdf, write_doc

from lab.data.extract import Unreadable, extract, normalise


def _check_offsets(got):
    for h in got.headings:
        if h.get("found", True):
            assert got.text[h["start"]:h["end"]].endswith(h["title"]) or h["title"] in got.text[h["start"]:h["end"]]


def test_normalise_whitespace_ligatures_and_control_characters():
    raw = "  Title\u00a0\u00a0here \t\r\n\r\n\r\n\r\nsecond\u200b line\x07 with \ufb01le and soft\u00adhyphen  \n"
    assert normalise(raw) == "Title here\n\nsecond line with file and softhyphen"
    assert normalise(normalise(raw)) == normalise(raw)
    assert normalise("中文\u3000全角空格　测试") == "中文 全角空格 测试"


def test_markdown_kept_as_text_with_atx_and_setext_headings_outside_code():
    src = ("---\ntitle: Front matter title\n---\n\n# Install  guide\n\nRun   the installer.\n\n```bash\n"
           "# not a heading\npip install x\n```\n\nUsage\n-----\n\nCall it.\n\n### Deep ###\ntext\n")
    got = extract(src.encode(), "markdown")
    assert got.title == "Install guide"
    assert [(h["level"], h["title"]) for h in got.headings] == [(1, "Install guide"), (2, "Usage"), (3, "Deep")]
    assert got.text[got.headings[0]["start"]:got.headings[0]["end"]] == "# Install guide"
    assert got.text[got.headings[1]["start"]:got.headings[1]["end"]] == "Usage"
    assert "# not a heading" in got.text and "Run the installer." in got.text and "-----" not in got.text
    assert extract(b"---\ntitle: Only front matter\n---\nbody text\n", "markdown").title == "Only front matter"


def test_rst_heading_levels_follow_adornment_order_and_txt_without_heading_has_no_title():
    src = "=====\nGuide\n=====\n\nIntro.\n\nSetup\n-----\n\nText.\n\nDetails\n~~~~~~~\n\nMore.\n\nAgain\n-----\n\nx\n"
    got = extract(src.encode(), "rst")
    assert [(h["level"], h["title"]) for h in got.headings] == [(1, "Guide"), (2, "Setup"), (3, "Details"),
                                                                  (2, "Again")]
    assert got.title == "Guide"
    _check_offsets(got)
    plain = extract(b"Just a note.\n\nSecond paragraph.\n" + b"-" * 40 + b"\n", "text")
    assert plain.title is None and plain.headings == []  # a separator line is no underline


def test_html_drops_navigation_header_footer_script_style_and_takes_first_heading_as_title():
    page = b"""<html><head><title>Pens | Site</title><style>.x{}</style></head><body>
      <div class="header"><p>Next: <a>Transforms</a>, Up: <a>Programming</a></p></div>
      <nav>Home Search</nav><div role="navigation">Sidebar links</div>
      <div class="sphinxsidebar"><h3>Navigation</h3></div>
      <article><header><h1>6.3 Pens</h1></header>
      <p>Pens provide a <code>context</code> for drawing.</p><script>alert(1)</script>
      <h2>Colour</h2><ul><li>red</li><li>blue</li></ul><table><tr><td>a</td><td>b</td></tr></table></article>
      <footer>Copyright</footer><!-- a comment --></body></html>"""
    got = extract(page, "html")
    assert got.title == "6.3 Pens" and got.meta["html_title"] == "Pens | Site"
    for gone in ("Next:", "Home", "Sidebar", "Navigation", "alert", "Copyright", ".x{}", "comment"):
        assert gone not in got.text
    assert "Pens provide a context for drawing." in got.text and "red\n\nblue" in got.text and "a b" in got.text
    assert [(h["level"], h["title"]) for h in got.headings] == [(1, "6.3 Pens"), (2, "Colour")]
    _check_offsets(got)
    sphinx = extract(b'<body><div class="body"><div class="section" id="navigation"><h2>Navigation</h2>'
                     b'<p>The navigation API moves between pages.</p></div></div>'
                     b'<div class="sphinxsidebar"><h3>Quick search</h3></div><div id="footer">Built with</div>'
                     b'<p><a class="headerlink" href="#x">\xc2\xb6</a></p></body>', "html")
    assert sphinx.text == "Navigation\n\nThe navigation API moves between pages."  # a section about navigation
    no_heading = extract(b"<html><head><title>Only title</title></head><body><p>x</p></body></html>", "html")
    assert no_heading.title == "Only title"


def test_html_of_the_asymptote_manual_keeps_content_without_texinfo_navigation():
    got = extract((RAW / "html" / "Pens.html").read_bytes(), "html")
    assert got.title == "6.3 Pens"
    assert got.text.startswith("6.3 Pens\n\nIn Asymptote, pens provide a context")
    assert "Previous:" not in got.text and "accesskey" not in got.text


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


def test_text_encodings_are_detected_and_chinese_works_in_every_format(tmp_path):
    zh = "向量检索的分块大小如何选择？本文比较了三种策略，并给出 BM25 与稠密检索的结果。"
    got = extract(("说明\n====\n\n" + zh + "\n").encode("gb18030"), "text")
    assert got.title == "说明" and zh in got.text and got.meta["encoding"].lower().replace("_", "") in (
        "gb18030", "gbk", "gb2312", "hz")
    latin = "Café crème: naïve façade déjà vu, coöperation and résumé in a longer sentence for detection."
    got = extract(latin.encode("cp1252"), "text")
    assert got.text == latin
    russian = "Привет! Это документ о поиске: как выбрать размер фрагмента для векторного поиска."
    assert extract(russian.encode("cp1251"), "text").text == russian
    utf16 = "\ufeff# 标题\n\n".encode("utf-16-le") + zh.encode("utf-16-le")
    assert extract(utf16, "markdown").text == "# 标题\n\n" + zh
    html_gbk = f'<html><head><meta charset="gbk"><title>中文</title></head><body><h1>检索</h1><p>{zh}</p></body></html>'
    got = extract(html_gbk.encode("gbk"), "html")
    assert got.title == "检索" and zh in got.text
    for ext in ("docx", "pdf", "rst", "md"):
        path = write_doc(tmp_path / f"zh.{ext}", "分块与检索 chunking", [zh, "Mixed 中英文 text, 第二段。"])
        got = extract(path.read_bytes(), {"md": "markdown"}.get(ext, ext))
        assert zh in got.text.replace("\n", ""), ext
        assert got.title == "分块与检索 chunking", ext


@pytest.mark.parametrize("name,data,kind", [
    ("empty.md", b"", "empty"),
    ("blank.txt", b"  \n\n ", "empty"),
    ("binary.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4, "binary"),
    ("undecodable.txt", bytes(range(0x80, 0x100)) * 40, "undecodable"),
    ("corrupt.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\nendobj\ntrailer <<", "corrupt"),
    ("notpdf.pdf", b"<html>this is not a pdf</html>", "corrupt"),
    ("corrupt.docx", b"PK\x03\x04 truncated zip", "corrupt"),
    ("legacy.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600, "encrypted"),
])
def test_unreadable_files_raise_with_a_kind_and_reason(name, data, kind):
    fmt = {"md": "markdown", "txt": "text"}.get(name.rsplit(".", 1)[1], name.rsplit(".", 1)[1])
    with pytest.raises(Unreadable) as info:
        extract(data, fmt)
    assert info.value.kind == kind and info.value.reason


def test_encrypted_pdf_is_unreadable_unless_the_empty_password_opens_it(tmp_path):
    with pytest.raises(Unreadable) as info:
        extract(encrypted_pdf(tmp_path / "locked.pdf", "secret").read_bytes(), "pdf")
    assert info.value.kind == "encrypted" and "password" in info.value.reason
    assert "nobody may read" in extract(encrypted_pdf(tmp_path / "owner.pdf", "").read_bytes(), "pdf").text
