"""Writers of real document files for the ingest tests: one function per format, title + paragraphs in, a file out.

PDF through reportlab (its bundled Bitstream Vera TrueType font, embedded; the STSong-Light CID font for Chinese),
DOCX through python-docx, the text formats and HTML by hand as their authors' tools write them.
"""
from __future__ import annotations

import html
import random
import re
import shutil
from pathlib import Path

import pypdf

FORMATS = ("md", "rst", "txt", "html", "docx", "pdf")
#: The committed Asymptote documentation, real pages to copy into a folder.
RAW = Path(__file__).resolve().parents[1] / "data" / "raw" / "asymptote"
#: Made-up words of a site's page text (:func:`prose`).
WORDS = [f"{a}{b}" for a in ("lo", "ra", "ve", "mu", "ti", "sa", "no", "ke", "pi", "do")
         for b in ("ban", "ster", "mid", "quor", "lith", "vex", "pond", "rill", "cas", "tum")]


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


def write_folder(root: Path) -> Path:
    """``root/docs``: one document of each format, two copied Asymptote pages, and files an ingest must skip
    (an image, an empty file, a broken and a locked PDF, Latin-1 and binary text, a hidden folder)."""
    src = root / "docs"
    write_doc(src / "guides" / "install.md", "Install", ["Run the installer."])
    write_doc(src / "guides" / "usage.rst", "Usage", ["Call the function."])
    write_doc(src / "faq.html", "FAQ", ["Questions and answers."])
    write_doc(src / "manual.pdf", "Manual", ["The whole manual."])
    write_doc(src / "notes.docx", "Notes", ["Meeting notes."])
    (src / "plain.txt").write_text("Plain text file.\n")
    shutil.copy(RAW / "faq" / "section1.html", src / "asy-faq-1.html")
    (src / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 50)
    (src / "empty.md").write_bytes(b"")
    (src / "broken.pdf").write_bytes(b"%PDF-1.5\ngarbage")
    encrypted_pdf(src / "locked.pdf", "secret")
    (src / "latin1.txt").write_bytes(bytes(range(0x80, 0x100)) * 40)
    (src / "blob.txt").write_bytes(b"\x00\x01\x02" * 100)
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return src


def prose(seed: int, n: int = 120) -> str:
    """``n`` words drawn (seeded) from :data:`WORDS`: text two pages share only by chance."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def site_page(path: Path, title: str, heading: str, paragraphs: list[str], day: int, toc: bool = False) -> None:
    """An HTML page built as the SQLite documentation is: a tagline div, an optional in-page table of contents, a
    heading, the paragraphs and a dated "last modified" footer."""
    toc_html = ('<div class="fancy_toc"><a onclick="toggle_toc()">Table Of Contents</a><div id="toc_sub">'
                '<div><a href="#s1">1. First part</a></div><div><a href="#s2">2. Second part</a></div></div></div>'
                if toc else "")
    body = "".join(f"<p>{p}</p>\n" for p in paragraphs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><head><title>{title}</title></head><body>\n"
                    '<div class="tagline">Small. Fast. Reliable.<br>Choose any three.</div>\n'
                    f"{toc_html}<h1>{heading}</h1>\n{body}"
                    f"<p>This page last modified on 2022-01-{day:02d} 21:38:08 UTC</p></body></html>\n")


def write_site(root: Path) -> Path:
    """``root/site``: a small site made like the SQLite documentation (C-API pages all headed "SQLite C Interface",
    generic "1. Overview" headings, a tiny page, one page also as PDF, robots.txt)."""
    src = root / "site"
    for i in range(6):
        site_page(src / "c3ref" / f"fn{i}.html", f"Function number {i}", "SQLite C Interface", [prose(i)], i + 1)
    site_page(src / "fts.html", "Full-text search", "1. Overview", [prose(10)], 11, toc=True)
    site_page(src / "json.html", "JSON functions", "1. Overview", [prose(11)], 12)
    site_page(src / "lang.html", "Query language", "Query language", [prose(12)], 13)
    site_page(src / "tiny.html", "Tiny page", "Tiny page", ["Only a few words here."], 14)
    site_page(src / "release.html", "Release terms", "Release terms", [prose(20), prose(21)], 15)
    write_doc(src / "release.pdf", "Release terms", [prose(20), prose(21)])  # the same page as a PDF
    (src / "robots.txt").write_text("User-agent: *\nDisallow: /search\n")
    return src
