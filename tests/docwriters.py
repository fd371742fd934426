"""Writers of real document files for the ingest tests: one function per format, title + paragraphs in, a file out.

PDF through reportlab (its bundled Bitstream Vera TrueType font, embedded; the STSong-Light CID font for Chinese),
DOCX through python-docx, the text formats and HTML by hand as their authors' tools write them.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pypdf

FORMATS = ("md", "rst", "txt", "html", "docx", "pdf")


def write_doc(path: Path, title: str, paragraphs: list[str]) -> Path:
    """Write ``title`` as a heading followed by ``paragraphs`` into ``path`` in the format of its extension."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ext = path.suffix.lstrip(".")
    {"md": _md, "rst": _rst, "txt": _txt, "html": _html, "docx": _docx, "pdf": _pdf}[ext](path, title, paragraphs)
    return path


def _md(path, title, paragraphs):
    path.write_text(f"# {title}\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")


def _rst(path, title, paragraphs):
    bar = "=" * max(3, sum(2 if ord(c) > 0x2E80 else 1 for c in title))
    path.write_text(f"{bar}\n{title}\n{bar}\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")


def _txt(path, title, paragraphs):
    path.write_text(title + "\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")


def _html(path, title, paragraphs):
    body = "".join(f"<p>{html.escape(p)}</p>\n" for p in paragraphs)
    path.write_text(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + html.escape(title) + " | Docs</title>"
        "<style>p { color: #333 }</style><script>var nav = 'menu';</script></head>\n<body>"
        "<nav><a href=\"/\">Home</a> <a href=\"/search\">Search the documentation</a></nav>\n"
        f"<main><h1>{html.escape(title)}</h1>\n{body}</main>\n"
        "<footer>Copyright the documentation team. Built with a static site generator.</footer></body></html>\n",
        encoding="utf-8")


def _docx(path, title, paragraphs):
    import docx

    d = docx.Document()
    d.add_heading(title, level=1)
    for p in paragraphs:
        d.add_paragraph(p)
    d.save(str(path))


_FONTS: dict[str, str] = {}


def _pdf_fonts() -> tuple[str, str]:
    if not _FONTS:
        import reportlab
        from reportlab.pdfbase import pdfmetrics
        from reportlab.pdfbase.cidfonts import UnicodeCIDFont
        from reportlab.pdfbase.ttfonts import TTFont

        fonts = Path(reportlab.__file__).parent / "fonts"
        pdfmetrics.registerFont(TTFont("Vera", str(fonts / "Vera.ttf")))
        pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
        _FONTS.update(latin="Vera", cjk="STSong-Light")
    return _FONTS["latin"], _FONTS["cjk"]


def _pdf(path, title, paragraphs, size=10.5, page=(595, 842), margin=60):
    """Paragraphs wrapped to the page width, several pages when long; the title a bookmark (outline entry)."""
    from reportlab.lib.utils import simpleSplit
    from reportlab.pdfgen import canvas

    latin, cjk = _pdf_fonts()
    font = lambda s: cjk if re.search(r"[\u2e80-\u9fff\uff00-\uffef]", s) else latin  # noqa: E731
    c = canvas.Canvas(str(path), pagesize=page)
    c.setTitle(title)
    width, y = page[0] - 2 * margin, page[1] - margin
    c.bookmarkPage("top")
    c.addOutlineEntry(title, "top", level=0)
    c.setFont(font(title), size + 4)
    c.drawString(margin, y, title)
    y -= 2 * size
    for para in paragraphs:
        f = font(para)
        lines = simpleSplit(para, f, size, width) if f == latin else _cjk_lines(para, f, size, width)
        for line in lines:
            if y < margin:
                c.showPage()
                y = page[1] - margin
            c.setFont(f, size)
            c.drawString(margin, y, line)
            y -= 1.3 * size
        y -= 0.7 * size
    c.save()


def _cjk_lines(text, font, size, width):
    from reportlab.pdfbase.pdfmetrics import stringWidth

    lines, cur = [], ""
    for ch in text:
        if stringWidth(cur + ch, font, size) > width:
            lines.append(cur)
            cur = ""
        cur += ch
    return lines + ([cur] if cur else [])


def encrypted_pdf(path: Path, user_password: str) -> Path:
    """A PDF at ``path`` (one page, "Secret") encrypted with RC4-128: ``user_password`` opens it for reading (the
    empty one: owner-only protection), "owner" for editing."""
    src = write_doc(path.with_suffix(".plain.pdf"), "Secret", ["A paragraph nobody may read."])
    writer = pypdf.PdfWriter(clone_from=str(src))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    with path.open("wb") as fh:
        writer.write(fh)
    src.unlink()
    return path
