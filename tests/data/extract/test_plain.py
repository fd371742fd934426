"""lab.data.extract.plain: markdown, rst and text headings, and encodings detected (Chinese in every format).

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, or
copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

from docwriters import write_doc

from lab.data.extract import extract


def _check_offsets(got):
    for h in got.headings:
        if h.get("found", True):
            assert got.text[h["start"]:h["end"]].endswith(h["title"]) or h["title"] in got.text[h["start"]:h["end"]]


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
