"""PDF: pages by pypdf without running heads and page numbers, words joined across hyphenated breaks, headings
from the outline."""
from __future__ import annotations

import io
import logging
import re
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Iterator

if TYPE_CHECKING:  # types only: pypdf is imported where used
    from pypdf import PdfReader

from lab.data.extract.extracted import MB, Extracted, Heading, Limits, Unreadable, assemble, normalise

_PAGE_NUMBER = re.compile(r"[-–—\s]*(\d+|(?=[ivx])x{0,3}(?:ix|iv|v?i{0,3}))[-–—\s]*")


def _running_key(line: str) -> str:
    """A line with its digits masked, lower case: how running heads and feet are compared across pages."""
    return re.sub(r"\d+", "#", line.lower())


def _page_lines(pages: list[str]) -> list[list[str]]:
    """Each page's non-empty lines with running heads/feet removed: the first or last line when the same line
    (digits ignored; at least 5 characters with a letter) is first or last on at least 3 pages ("Chapter 6:
    Programming 36"), and a bare page number (arabic or lower-case roman) among the first or last two."""
    lines = [[ln.strip() for ln in normalise(p).split("\n") if ln.strip()] for p in pages]
    counts: dict[str, int] = {}
    for page in lines:
        for ln in {_running_key(x) for x in page[:1] + page[-1:]}:
            counts[ln] = counts.get(ln, 0) + 1
    running = {k for k, c in counts.items() if c >= 3 and len(k) >= 5 and re.search(r"[^\W\d_]", k)}
    out = []
    for page in lines:
        keep = list(page)
        for idx in (0, -1, 1, -2):
            if len(keep) > abs(idx) and ((idx in (0, -1) and _running_key(keep[idx]) in running)
                                         or _PAGE_NUMBER.fullmatch(keep[idx])):
                keep[idx] = ""
        out.append([x for x in keep if x])
    return out


def _dehyphenate(pages: list[list[str]]) -> list[list[str]]:
    """Join words hyphenated across a line or page break ("exam-" + "ple"); keep the hyphen when the document
    uses the hyphenated form elsewhere."""
    hyphenated = set(re.findall(r"\w+-\w+", "\n".join("\n".join(p) for p in pages)))
    flat = [(pi, li) for pi, p in enumerate(pages) for li in range(len(p))]
    for (pa, la), (pb, lb) in zip(flat, flat[1:], strict=False):
        left, right = pages[pa][la], pages[pb][lb]
        m, n = re.search(r"(\w+)-$", left), re.match(r"^([a-z]\w*)(.*)$", right)
        if not m or not n or not m.group(1)[-1].isalpha():
            continue
        head, tail = m.group(1), n.group(1)
        joined = head + ("-" if f"{head}-{tail}" in hyphenated else "") + tail
        pages[pa][la] = left[: m.start()]
        pages[pb][lb] = joined + n.group(2)
    return [[ln for ln in p if ln.strip()] for p in pages]


_LEADERS = re.compile(r"(?:\s?\.){4,}\s?")  # table-of-contents dot leaders ". . . . ."


def extract_pdf(data: bytes, limits: Limits | None = None) -> Extracted:
    """PDF text page by page (pypdf), running heads and page numbers dropped, hyphenation joined; ``pages`` and
    ``page_offsets`` in meta; headings from the outline. Encrypted files are read when the empty user password
    opens them (owner-only protection), else skipped."""

    import pypdf

    if not data.lstrip()[:5].startswith(b"%PDF"):
        raise Unreadable("corrupt", "not a PDF (no %PDF header)")
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)  # pypdf logs damage it recovers from as warnings: not the user's business here
    try:
        return _read_pdf(data, pypdf, limits or Limits())
    finally:
        logger.setLevel(level)


def _read_pdf(data: bytes, pypdf: ModuleType, limits: Limits) -> Extracted:
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):
                    raise Unreadable("encrypted", "encrypted PDF: needs a password")
            except (FileNotDecryptedError, NotImplementedError, DependencyError) as exc:
                raise Unreadable("encrypted", f"encrypted PDF: cannot be opened ({exc})") from None
        if len(reader.pages) > limits.max_pdf_pages:
            raise Unreadable("too_large", f"{len(reader.pages):,} pages (limit {limits.max_pdf_pages:,}, "
                             "--max-pdf-pages)")
        texts, chars = [], 0
        for page in reader.pages:
            texts.append(page.extract_text() or "")
            chars += len(texts[-1])
            if chars > limits.max_text_mb * MB:
                raise Unreadable("too_large", f"more than {limits.max_text_mb:g} MiB of text by page "
                                 f"{len(texts)} (--max-text-mb)")
        outline = list(_outline(reader))
        info = (reader.metadata or {}).get("/Title")
        info_title = " ".join(normalise(info).split()) or None if isinstance(info, str) else None
    except Unreadable:
        raise
    except FileNotDecryptedError:
        raise Unreadable("encrypted", "encrypted PDF: needs a password") from None
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError,
            AssertionError, ZeroDivisionError, OSError) as exc:
        raise Unreadable("corrupt", f"corrupt PDF ({type(exc).__name__}: {exc})") from None
    pages = [[_LEADERS.sub(" ... ", ln) for ln in p] for p in _dehyphenate(_page_lines(texts))]
    text, _, offsets = assemble([("\n".join(p), None) for p in pages])
    bounds = offsets + [len(text)]
    headings: list[Heading] = []
    for level, title, page in outline:
        start, end, found = _find_on_page(text, title, bounds[page] if page is not None else 0,
                                          bounds[page + 1] if page is not None else len(text))
        headings.append({"level": level, "title": title, "start": start, "end": end, "found": found})
    headings.sort(key=lambda h: h["start"])
    doc_title = headings[0]["title"] if headings else info_title
    return Extracted(text, doc_title, headings, {"pages": len(texts), "page_offsets": offsets[: len(texts)]})


def _outline(reader: PdfReader) -> Iterator[tuple[int, str, int | None]]:
    def walk(items: Iterable[Any], depth: int) -> Iterator[tuple[int, str, int | None]]:
        for item in items:
            if isinstance(item, list):
                yield from walk(item, depth + 1)
                continue
            title = " ".join(normalise(str(getattr(item, "title", "") or "")).split())
            if not title:
                continue
            try:
                page = reader.get_destination_page_number(item)
            except Exception:  # noqa: BLE001 - a broken bookmark only loses its page
                page = None
            yield depth + 1, title, page if page is not None and 0 <= page < len(reader.pages) else None

    try:
        yield from walk(reader.outline, 0)
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError):
        return


def _find_on_page(text: str, title: str, lo: int, hi: int) -> tuple[int, int, bool]:
    i = text.find(title, lo, hi)
    if i < 0:
        words = [re.escape(w) for w in title.split()]
        m = re.compile(r"\s+".join(words), re.I).search(text, lo, hi) if words else None
        if m:
            return m.start(), m.end(), True
        return lo, lo, False
    return i, i + len(title), True
