"""`lab ingest`: the folder ingest and its rerun (lab.data.ingest), the CLI (per-format extraction: test_extract.py).

Files are real: written by python-docx and reportlab (tests/docwriters.py), encoded with real code pages, and a
few copied from the committed Asymptote documentation (data/raw/asymptote)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from docwriters import encrypted_pdf, write_doc
from lab.cli.main import main
from lab.data.ingest import document_id, ingest

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "data" / "raw" / "asymptote"


# ------------------------------------------------------------------------------------------------ the folder

def test_document_ids_are_relative_paths_without_extension():
    assert document_id("guides/install.md") == "guides/install"
    assert document_id("v1.2/notes.txt") == "v1.2/notes"
    assert document_id("README") == "README"


def _folder(root: Path) -> Path:
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


def test_ingest_writes_corpus_and_report_skipping_unreadable_files_with_reasons(tmp_path):
    src, out = _folder(tmp_path), tmp_path / "out"
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

    src, out = _folder(tmp_path), tmp_path / "out"
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


# ------------------------------------------------------------------------------------------------------- CLI

def test_cli_prints_summary_exit_0_and_strict_exit_1(tmp_path, capsys):
    src = _folder(tmp_path)
    assert main(["ingest", str(src), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "ingested 7 documents" in out and "skipped 6 files" in out
    assert main(["ingest", str(src), "--out", str(tmp_path / "o"), "--no-progress", "--strict"]) == 1
    assert "--strict: 6 files were skipped" in capsys.readouterr().out
    assert main(["ingest", str(src), "--out", str(tmp_path / "o2"), "--exclude", "*.png", "--exclude", "locked.pdf",
                 "--exclude", "blob.txt", "--exclude", "latin1.txt", "--exclude", "broken.pdf",
                 "--exclude", "empty.md", "--strict", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["excluded"] == 6


@pytest.mark.parametrize("case", ["missing_src", "no_out", "out_is_file", "foreign_corpus", "out_is_src", "limit",
                                  "share", "min_words"])
def test_cli_bad_arguments_exit_2_with_one_line(tmp_path, case):
    src = tmp_path / "docs"
    src.mkdir()
    (src / "a.md").write_text("# A\n")
    out = tmp_path / "out"
    args = [str(src), "--out", str(out)]
    if case == "missing_src":
        args = [str(tmp_path / "nope"), "--out", str(out)]
    elif case == "no_out":
        args = [str(src)]
    elif case == "out_is_file":
        out.write_text("x")
    elif case == "foreign_corpus":
        out.mkdir()
        (out / "corpus.jsonl").write_text('{"_id": "1", "text": "someone else\'s"}\n')
    elif case == "out_is_src":
        args = [str(src), "--out", str(src)]
    elif case == "limit":
        args += ["--max-zip-ratio", "0"]
    elif case == "share":
        args += ["--boilerplate-share", "1.5"]
    elif case == "min_words":
        args += ["--min-words", "-1"]
    proc = subprocess.run([sys.executable, "-m", "lab", "ingest", *args, "--no-progress"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    if case == "foreign_corpus":
        assert (out / "corpus.jsonl").read_text().startswith('{"_id": "1"')  # untouched
