"""HTML: the page without navigation, site chrome, scripts and styles; headings from ``h1``-``h6``, the title from
the first heading or ``<title>``."""
from __future__ import annotations

import re
from typing import Any

import lxml.html
from lxml import etree

from lab.data.extract.extracted import Extracted, Unreadable, assemble
from lab.data.extract.plain import BOMS, decode_text

_DROP_TAGS = {"script", "style", "noscript", "template", "nav", "footer", "aside", "form", "button", "iframe",
              "svg", "canvas", "select", "textarea", "object", "embed", "head", "menu", "dialog"}
_DROP_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary", "menu", "menubar"}
#: class/id words (split on space, "-", "_") that mark navigation in documentation generators' output.
_NAV_WORDS = {"nav", "navbar", "navigation", "navheader", "navfooter", "breadcrumb", "breadcrumbs", "sidebar",
              "sphinxsidebar", "sphinxsidebarwrapper", "related", "footer", "menu", "toolbar", "skip", "skiplink",
              "topbar", "sidenav", "pagination", "prevnext", "headerlink", "copiable", "banner", "cookie", "toc",
              "tableofcontents"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = {"p", "div", "section", "article", "main", "body", "li", "ul", "ol", "dl", "dt", "dd", "table", "thead",
           "tbody", "tfoot", "tr", "blockquote", "pre", "figure", "figcaption", "caption", "hr", "address",
           "details", "summary", "center", "fieldset", "legend", "header"}
_CELLS = {"td", "th"}
_SPACE = re.compile(r"\s+")  # HTML source line breaks are spaces; only <br> and block ends break lines
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def _words(value: str | None) -> set[str]:
    return {w for w in re.split(r"[\s_\-]+", (value or "").lower()) if w}


def _has_heading(el: Any) -> bool:  # an lxml element (lxml ships no types)
    return any(d.tag in _HEADINGS for d in el.iter() if isinstance(d.tag, str))


def _is_boilerplate(el: Any) -> bool:
    tag = el.tag.lower() if isinstance(el.tag, str) else ""
    if tag in _DROP_TAGS or (el.get("role") or "").lower() in _DROP_ROLES or el.get("hidden") is not None:
        return True
    if "display:none" in (el.get("style") or "").replace(" ", "").lower():
        return True
    if tag in ("main", "article", "section", "body"):
        return False
    classes, ids = _words(el.get("class")), _words(el.get("id"))
    if classes & _NAV_WORDS:
        return True
    # ids are often slugs of a section's own heading (Sphinx: <div id="navigation"> around "Navigation"), so an
    # id counts only on an element without headings; a header is navigation unless it holds a heading
    # (texinfo "header" divs are Next/Previous/Up links; an <article><header><h1> is content)
    if ids & _NAV_WORDS or tag == "header" or "header" in classes | ids:
        return not _has_heading(el)
    return False


def _html_decode(data: bytes) -> tuple[str, str, dict[str, Any] | None]:
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(encoding.replace("-sig", ""), errors="replace"), encoding, None
    m = _META_CHARSET.search(data[:4096])
    if m:
        name = m.group(1).decode("ascii").lower()
        try:
            return data.decode(name), name, None
        except (LookupError, UnicodeDecodeError):
            pass  # a wrong declaration: detect instead
    return decode_text(data)


def extract_html(data: bytes) -> Extracted:
    """HTML without navigation, headers, footers, sidebars, scripts and styles; headings from h1-h6; title the
    first heading, else ``<title>``. Encoding: byte-order mark, ``<meta charset>``, UTF-8, detection."""
    raw, encoding, guess = _html_decode(data)
    raw = re.sub(r"^\s*<\?xml[^>]*\?>", "", raw)  # lxml refuses str input with an encoding declaration
    if not raw.strip():
        raise Unreadable("empty", "empty file (no text)")
    try:
        root = lxml.html.document_fromstring(raw)
    except (etree.ParserError, ValueError) as exc:
        raise Unreadable("corrupt", f"not parseable as HTML ({exc})") from None
    page_title = None
    title_el = root.find(".//title")
    if title_el is not None and title_el.text_content().strip():
        page_title = " ".join(title_el.text_content().split())
    for el in list(root.iter()):
        if el.getparent() is not None and isinstance(el.tag, str) and _is_boilerplate(el):
            el.drop_tree()
    blocks: list[tuple[str, int | None]] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            blocks.append(("".join(buf), None))
            buf.clear()

    def walk(el: Any) -> None:
        tag = el.tag.lower() if isinstance(el.tag, str) else ""
        if tag in _HEADINGS or tag == "pre":  # one block of the element's whole text (a heading has a level)
            flush()
            blocks.append((el.text_content(), _HEADINGS.get(tag)))
        elif tag == "br":
            buf.append("\n")
        elif tag:  # comments and processing instructions have no str tag: only their tail counts
            block = tag in _BLOCKS
            if block:
                flush()
            if tag in _CELLS:
                buf.append(" ")
            if el.text:
                buf.append(_SPACE.sub(" ", el.text))
            for child in el:
                walk(child)
            if block:
                flush()
            elif tag in _CELLS:
                buf.append(" ")
        if el.tail:
            buf.append(_SPACE.sub(" ", el.tail))

    body = root.find("body")
    walk(body if body is not None else root)
    flush()
    text, headings, _ = assemble(blocks)
    return Extracted(text, headings[0]["title"] if headings else page_title, headings,
                     {"encoding": encoding, "html_title": page_title, "encoding_guess": guess})
