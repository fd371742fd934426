"""lab.data.extract.html: navigation and site chrome dropped, the first heading as title, the Asymptote manual.

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, or
copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

from docwriters import RAW

from lab.data.extract import extract


def _check_offsets(got):
    for h in got.headings:
        if h.get("found", True):
            assert got.text[h["start"]:h["end"]].endswith(h["title"]) or h["title"] in got.text[h["start"]:h["end"]]


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
