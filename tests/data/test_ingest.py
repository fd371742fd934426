"""`lab ingest`: the folder ingest and its rerun (lab.data.ingest), the CLI (per-format extraction: test_extract.py).

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, and a
few copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

import json

from docwriters import write_doc, write_folder

from lab.data.ingest import document_id, ingest

# ------------------------------------------------------------------------------------------------ the folder

def test_document_ids_are_relative_paths_without_extension():
    assert document_id("guides/install.md") == "guides/install"
    assert document_id("v1.2/notes.txt") == "v1.2/notes"
    assert document_id("README") == "README"


def test_ingest_writes_corpus_and_report_skipping_unreadable_files_with_reasons(tmp_path):
    src, out = write_folder(tmp_path), tmp_path / "out"
    rep = ingest(src, out, progress=False)
    docs = {d["_id"]: d for d in map(json.loads, (out / "corpus.jsonl").read_text().splitlines())}
    assert sorted(docs) == ["asy-faq-1", "faq", "guides/install", "guides/usage", "manual", "notes", "plain"]
    assert docs["guides/install"]["title"] == "Install" and docs["plain"]["title"] == "plain"
    assert docs["asy-faq-1"]["title"].startswith("Asymptote FAQ - Section 1")
    meta = docs["manual"]["metadata"]
    assert meta["format"] == "pdf" and meta["pages"] == 1 and meta["source"] == "manual.pdf"
    assert len(meta["sha256"]) == 64
    assert meta["size"] == (src / "manual.pdf").stat().st_size
    assert docs["faq"]["metadata"]["headings"][0] == {"level": 1, "title": "FAQ", "start": 0, "end": 3}
    kinds = {s["path"]: s["kind"] for s in rep.skipped}
    assert kinds == {"figure.png": "unknown_extension", "empty.md": "empty", "broken.pdf": "corrupt",
                     "locked.pdf": "encrypted", "latin1.txt": "undecodable", "blob.txt": "binary"}
    report = json.loads((out / "ingest_report.json").read_text())
    assert report["by_format"]["pdf"] == {"files": 3, "documents": 1, "skipped": 2}
    assert report["documents"] == 7 and report["hidden_ignored"] == 1 and report["rerun"]["new"] == 12
    text = rep.summary()
    assert "ingested 7 documents" in text and "unknown extension .png: figure.png" in text and "locked.pdf" in text


def test_out_inside_src_is_not_ingested_and_the_fingerprint_ignores_the_report(tmp_path):
    from lab.data import fingerprint

    src = tmp_path / "docs"
    write_doc(src / "a.md", "A", ["Alpha."])
    ingest(src, src / "corpus", progress=False)
    fp = fingerprint(src / "corpus")
    write_doc(src / "b.html", "B", ["Beta."])
    rep = ingest(src, src / "corpus", progress=False)
    assert rep.documents == 2 and rep.skipped == [] and rep.reused == 1  # corpus.jsonl etc. are not inputs
    assert fingerprint(src / "corpus") != fp
    fp2 = fingerprint(src / "corpus")
    ingest(src, src / "corpus", progress=False)  # same corpus, a new report (timings, rerun counts)
    assert fingerprint(src / "corpus") == fp2


def test_same_stem_files_are_both_kept_with_their_extension_and_every_collision_is_reported(tmp_path):
    src = tmp_path / "docs"
    write_doc(src / "a.md", "Alpha notes", ["Alpha is the first letter of the Greek alphabet in this note."])
    write_doc(src / "a.html", "Alpha page", ["Alpha is also a web page about letters and their order."])
    write_doc(src / "a b.md", "Spaced", ["A file name with a space in it."])
    write_doc(src / "a_b.md", "Underscored", ["A file name with an underscore in it."])
    write_doc(src / "b.md", "Beta", ["Beta stands alone."])
    rep = ingest(src, tmp_path / "out", progress=False)
    docs = {d["_id"]: d for d in map(json.loads, (tmp_path / "out" / "corpus.jsonl").read_text().splitlines())}
    assert sorted(docs) == ["a.html", "a.md", "a_b", "a_b~2", "b"]
    assert docs["a_b"]["metadata"]["source"] == "a b.md" and docs["a_b~2"]["metadata"]["source"] == "a_b.md"
    assert rep.id_collisions == [{"id": "a", "paths": ["a.html", "a.md"], "ids": ["a.html", "a.md"]},
                                 {"id": "a_b", "paths": ["a b.md", "a_b.md"], "ids": ["a_b", "a_b~2"]}]
    assert "id collision 'a': a.html -> a.html, a.md -> a.md" in rep.summary()
    assert "id collision 'a_b'" in rep.summary()


def test_rerun_reads_only_changed_files_and_drops_deleted_ones(tmp_path, monkeypatch):
    import lab.data.ingest as ingest_module

    src, out = write_folder(tmp_path), tmp_path / "out"
    ingest(src, out, progress=False)
    first = (out / "corpus.jsonl").read_text()
    read: list[str] = []
    real = ingest_module._document
    monkeypatch.setattr(ingest_module, "_document", lambda rel, *a: read.append(rel) or real(rel, *a))
    rep = ingest(src, out, progress=False)
    assert read == [] and rep.reused == 12 and (rep.changed, rep.new, rep.dropped) == (0, 0, [])
    assert (out / "corpus.jsonl").read_text() == first and len(rep.skipped) == 6
    (src / "guides" / "install.md").write_text("# Install\n\nRun the new installer.\n")
    (src / "faq.html").unlink()
    (src / "empty.md").unlink()
    write_doc(src / "new.md", "New page", ["Fresh."])
    rep = ingest(src, out, progress=False)
    assert sorted(read) == ["guides/install.md", "new.md"]
    assert (rep.reused, rep.changed, rep.new, rep.dropped) == (9, 1, 1, ["empty.md", "faq.html"])
    docs = {d["_id"]: d for d in map(json.loads, (out / "corpus.jsonl").read_text().splitlines())}
    assert "faq" not in docs and "new" in docs and "new installer" in docs["guides/install"]["text"]
    assert "1 changed, 1 new, 2 dropped" in rep.summary()
