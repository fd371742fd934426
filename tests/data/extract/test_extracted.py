"""lab.data.extract.extracted: normalisation, and unreadable files refused with a kind and a reason.

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, or
copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

import pytest

from lab.data.extract import Unreadable, extract, normalise


def test_normalise_whitespace_ligatures_and_control_characters():
    raw = "  Title\u00a0\u00a0here \t\r\n\r\n\r\n\r\nsecond\u200b line\x07 with \ufb01le and soft\u00adhyphen  \n"
    assert normalise(raw) == "Title here\n\nsecond line with file and softhyphen"
    assert normalise(normalise(raw)) == normalise(raw)
    assert normalise("中文\u3000全角空格　测试") == "中文 全角空格 测试"


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
