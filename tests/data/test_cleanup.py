"""`lab ingest` on a real-looking site: site-wide boilerplate dropped and counted, titles from
``<title>`` where the first heading is generic or shared, near-duplicates (the same page as HTML and PDF)
reported and ``--dedupe``d, short documents reported and ``--min-words`` skipped, robots.txt not a document.

The site is made here as the SQLite documentation is built (a tagline div, a "last modified" footer with dates,
an in-page table of contents, C-API pages all headed "SQLite C Interface"); page text is deterministic random
words, so pages share nothing but their template."""
from __future__ import annotations

import json
from pathlib import Path

from docwriters import prose, site_page, write_doc, write_site

from lab.data import cleanup
from lab.data.ingest import ingest


def _corpus(out: Path) -> dict[str, dict]:
    return {d["_id"]: d for d in map(json.loads, (out / "corpus.jsonl").read_text().splitlines())}


def test_site_boilerplate_is_dropped_counted_and_the_most_frequent_shown(tmp_path):
    src, out = write_site(tmp_path), tmp_path / "out"
    rep = ingest(src, out, progress=False)
    docs = _corpus(out)
    html = [d for d in docs.values() if d["metadata"]["format"] == "html"]
    assert len(html) == 11
    for d in html:
        assert "Choose any three" not in d["text"] and "last modified" not in d["text"], d["_id"]
        assert "Table Of Contents" not in d["text"] and "First part" not in d["text"]  # in-page TOC: navigation
        for h in d["metadata"]["headings"]:  # offsets still point at the headings
            assert d["text"][h["start"]:h["end"]] == h["title"]
    assert "SQLite C Interface" not in docs["c3ref/fn0"]["text"]  # the first heading of 6 of 11 pages
    assert prose(0) in docs["c3ref/fn0"]["text"]
    top = {t["text"]: t["documents"] for t in rep.boilerplate["top"]}
    assert top["Small. Fast. Reliable.\nChoose any three."] == 11
    assert top["This page last modified on #-#-# #:#:# UTC"] == 11  # dates differ, the template does not
    assert rep.boilerplate["documents"] == 11 and rep.boilerplate["dropped"] == 11 * 2 + 6
    assert "boilerplate: 3 blocks repeated in >= 20% of the HTML pages" in rep.summary()
    assert "release.pdf" in docs and prose(20)[:40] in docs["release.pdf"]["text"]  # other formats untouched
    kept = ingest(src, tmp_path / "kept", progress=False, boilerplate_share=0)
    assert "Choose any three" in _corpus(tmp_path / "kept")["lang"]["text"] and kept.boilerplate["blocks"] == 0


def test_titles_come_from_the_page_title_where_the_first_heading_is_generic_or_shared(tmp_path):
    src, out = write_site(tmp_path), tmp_path / "out"
    rep = ingest(src, out, progress=False)
    titles = {i: d["title"] for i, d in _corpus(out).items()}
    assert titles["c3ref/fn3"] == "Function number 3"  # "SQLite C Interface" on 6 pages (and boilerplate)
    assert titles["fts"] == "Full-text search" and titles["json"] == "JSON functions"  # "1. Overview": generic
    assert titles["lang"] == "Query language"
    assert len(set(titles.values())) == len(titles) - 1  # only release.html and release.pdf share a title
    assert rep.titles_from_page_title == 8
    assert cleanup._GENERIC.match("2.1. Introduction") and not cleanup._GENERIC.match("Summary")


def test_near_duplicates_are_reported_and_dedupe_keeps_the_text_format(tmp_path):
    src = write_site(tmp_path)
    rep = ingest(src, tmp_path / "out", progress=False)
    assert [(p["a"], p["b"]) for p in rep.near_duplicates] == [("release.html", "release.pdf")]
    assert rep.near_duplicates[0]["containment"] >= 0.9
    assert "1 near-duplicate pairs" in rep.summary() and "release.html ~ release.pdf" in rep.summary()
    assert {"release.html", "release.pdf"} <= set(_corpus(tmp_path / "out"))  # reported, not dropped
    rep = ingest(src, tmp_path / "dd", progress=False, dedupe=True)
    docs = _corpus(tmp_path / "dd")
    assert "release.html" in docs and "release.pdf" not in docs
    (skip,) = [s for s in rep.skipped if s["kind"] == "duplicate"]
    assert skip["path"] == "release.pdf" and "near-duplicate of release.html" in skip["reason"]
    assert rep.by_format["pdf"] == {"files": 1, "documents": 0, "skipped": 1}


def test_short_documents_are_reported_min_words_skips_them_and_robots_txt_is_no_document(tmp_path):
    src = write_site(tmp_path)
    rep = ingest(src, tmp_path / "out", progress=False)
    assert rep.short_documents == [{"id": "tiny", "words": 7}]  # "Tiny page" + "Only a few words here."
    assert "tiny" in _corpus(tmp_path / "out") and "robots" not in _corpus(tmp_path / "out")
    assert {s["path"]: s["kind"] for s in rep.skipped} == {"robots.txt": "not_a_document"}
    rep = ingest(src, tmp_path / "mw", progress=False, min_words=20)
    assert "tiny" not in _corpus(tmp_path / "mw")
    assert {s["path"]: s["reason"] for s in rep.skipped if s["kind"] == "too_short"} == {
        "tiny.html": "7 words (--min-words 20)"}


def test_a_rerun_reuses_extraction_and_cleans_the_same_way(tmp_path, monkeypatch):
    import lab.data.ingest as ingest_module

    src, out = write_site(tmp_path), tmp_path / "out"
    ingest(src, out, progress=False, min_words=20)
    first = (out / "corpus.jsonl").read_text()
    read: list[str] = []
    real = ingest_module._document
    monkeypatch.setattr(ingest_module, "_document", lambda rel, *a: read.append(rel) or real(rel, *a))
    rep = ingest(src, out, progress=False, min_words=20)
    assert read == [] and (out / "corpus.jsonl").read_text() == first
    assert rep.boilerplate["dropped"] == 28 and [s["kind"] for s in rep.skipped].count("too_short") == 1
    rep = ingest(src, out, progress=False)  # without --min-words the short page is back, still not re-read
    assert read == [] and "tiny" in _corpus(out)


def test_a_page_of_nothing_but_boilerplate_is_skipped_and_a_rerun_renames_a_reused_document(tmp_path):
    src, out = write_site(tmp_path), tmp_path / "out"
    site_page(src / "empty.html", "Empty", "", [], 16)  # only the tagline and the footer
    rep = ingest(src, out, progress=False)
    assert {s["path"]: s["kind"] for s in rep.skipped}["empty.html"] == "only_boilerplate"
    assert "lang" in _corpus(out)
    write_doc(src / "lang.md", "Query language notes", [prose(30)])  # now lang.html shares its stem
    rep = ingest(src, out, progress=False)
    assert rep.reused >= 11 and {"lang.html", "lang.md"} <= set(_corpus(out)) and "lang" not in _corpus(out)
    assert {"id": "lang", "paths": ["lang.html", "lang.md"], "ids": ["lang.html", "lang.md"]} in rep.id_collisions
