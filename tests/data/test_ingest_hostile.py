"""`lab ingest` on hostile folders: bombs and huge files refused in seconds and bounded memory, links
never followed out of SRC, special files listed, TREC-safe ids, low-confidence encodings reported.

Every file is made here for real: a DOCX whose document.xml inflates to 200 MiB, symbolic links, a FIFO, a
socket, legacy code pages."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from docwriters import write_doc

from lab.data.extract import Limits, Unreadable, extract
from lab.data.ingest import ingest

REPO = Path(__file__).resolve().parents[2]


def _docx_bomb(path: Path, inflated_mb: int) -> Path:
    """A real DOCX (python-docx) whose word/document.xml is replaced by one paragraph of ``inflated_mb`` MiB of
    one letter: a few hundred KiB on disk; written in 1 MiB pieces so the test itself stays small."""
    plain = write_doc(path.with_suffix(".plain.docx"), "Bomb", ["placeholder"])
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if item.filename != "word/document.xml":
                zout.writestr(item, zin.read(item.filename))
        with zout.open("word/document.xml", "w", force_zip64=True) as fh:
            fh.write(b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="http://'
                     b'schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>')
            chunk = b"a" * (1 << 20)
            for _ in range(inflated_mb):
                fh.write(chunk)
            fh.write(b"</w:t></w:r></w:p></w:body></w:document>")
    plain.unlink()
    return path


def test_a_docx_bomb_is_skipped_in_seconds_and_bounded_memory_with_its_reason(tmp_path):
    src = tmp_path / "docs"
    bomb = _docx_bomb(src / "bomb.docx", 200)
    assert bomb.stat().st_size < 2 << 20  # a few hundred KiB that inflate to 200 MiB
    write_doc(src / "ok.md", "Fine", ["An ordinary page."])
    script = ("import json, resource, sys\nfrom lab.data.ingest import ingest\n"
              f"rep = ingest({str(src)!r}, {str(tmp_path / 'out')!r}, progress=False)\n"
              "use = resource.getrusage(resource.RUSAGE_SELF)\n"
              # VmHWM is this process's own peak; ru_maxrss also keeps the forking parent's peak across exec
              # (Linux copies the old mm's high-water mark), so under a big pytest process it read 2.6 GB
              "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
              "print(json.dumps({'rss_kib': hwm, 'cpu_s': use.ru_utime + use.ru_stime,"
              " 'skipped': rep.skipped, 'documents': rep.documents}))\n")
    proc = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["documents"] == 1
    (skip,) = got["skipped"]
    assert skip["path"] == "bomb.docx" and skip["kind"] == "too_large", skip
    assert "zip bomb" in skip["reason"] and "document.xml" in skip["reason"] and "--max-zip-ratio" in skip["reason"]
    # CPU seconds of the child (imports included), not wall time, so a loaded machine does not fail it: refused from
    # the zip directory, nothing inflated (the probe on main: 3 min 51 s, then MemoryError)
    assert got["cpu_s"] < 60, got["cpu_s"]
    assert got["rss_kib"] < 600 * 1024, got["rss_kib"]  # the probe on main: 3.7 GB


def test_zip_limits_total_size_and_ratio_are_checked_from_the_directory(tmp_path):
    bomb = _docx_bomb(tmp_path / "b.docx", 3).read_bytes()
    with pytest.raises(Unreadable) as info:
        extract(bomb, "docx", Limits(max_unzipped_mb=2, max_zip_ratio=10_000))
    assert info.value.kind == "too_large" and "--max-unzipped-mb" in info.value.reason
    with pytest.raises(Unreadable) as info:
        extract(bomb, "docx", Limits(max_zip_ratio=50))
    assert "--max-zip-ratio" in info.value.reason
    got = extract(bomb, "docx", Limits(max_zip_ratio=10_000))  # within the limits it is read
    assert len(got.text) == 3 << 20


def test_pdf_page_limit_and_file_size_limits(tmp_path):
    import pypdf

    writer = pypdf.PdfWriter()
    for _ in range(5):
        writer.add_blank_page(100, 100)
    pdf = tmp_path / "docs" / "many.pdf"
    pdf.parent.mkdir()
    with pdf.open("wb") as fh:
        writer.write(fh)
    with pytest.raises(Unreadable) as info:
        extract(pdf.read_bytes(), "pdf", Limits(max_pdf_pages=3))
    assert info.value.kind == "too_large" and "5 pages (limit 3, --max-pdf-pages)" in info.value.reason
    (pdf.parent / "big.html").write_text("<p>" + "word " * 300_000 + "</p>")  # 1.5 MB
    rep = ingest(pdf.parent, tmp_path / "out", progress=False, limits=Limits(max_text_mb=1, max_pdf_pages=3))
    reasons = {s["path"]: s["reason"] for s in rep.skipped}
    assert reasons["big.html"].startswith("1.4 MiB (limit 1 MiB for html, --max-text-mb)")
    assert "--max-pdf-pages" in reasons["many.pdf"]
    assert rep.to_dict()["limits"]["max_text_mb"] == 1


def test_links_out_of_src_loops_fifos_and_sockets_are_listed_never_followed(tmp_path):
    src, outside = tmp_path / "docs", tmp_path / "outside"
    write_doc(src / "real.md", "Real", ["Inside the folder."])
    write_doc(outside / "secret.md", "Secret", ["The password is swordfish."])
    os.symlink(outside / "secret.md", src / "leak.md")
    os.symlink(outside, src / "leakdir")
    os.symlink("real.md", src / "alias.md")  # a link inside SRC: read under its own path
    os.symlink(src / "sub", src / "subalias")
    write_doc(src / "sub" / "page.md", "Page", ["A page in a sub-folder."])
    os.symlink("loop2.md", src / "loop1.md")
    os.symlink("loop1.md", src / "loop2.md")
    os.symlink("missing.md", src / "broken.md")
    os.mkfifo(src / "pipe.md")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock.md"))
    try:
        rep = ingest(src, tmp_path / "out", progress=False)
    finally:
        sock.close()
    corpus = (tmp_path / "out" / "corpus.jsonl").read_text()
    assert "swordfish" not in corpus
    assert sorted(json.loads(line)["_id"] for line in corpus.splitlines()) == ["alias", "real", "sub/page"]
    kinds = {s["path"]: s["kind"] for s in rep.skipped}
    assert kinds == {"leak.md": "link_outside", "leakdir": "link_outside", "subalias": "link_to_folder",
                     "loop1.md": "link_loop", "loop2.md": "link_loop", "broken.md": "broken_link",
                     "pipe.md": "fifo", "sock.md": "socket"}
    assert all(s["reason"] for s in rep.skipped)
    text = rep.summary()
    assert "link outside: leak.md, leakdir" in text and "fifo: pipe.md" in text and "socket: sock.md" in text


def test_ids_are_trec_safe_with_the_original_path_in_metadata(tmp_path):
    from lab.data import Run, read_trec_run, write_trec_run

    src = tmp_path / "docs"
    names = ["my notes.md", "tab\there.md", "new\nline.md"]
    for n in names:
        write_doc(src / n, "Odd name", [f"A document stored as {n!r}."])
    rep = ingest(src, tmp_path / "out", progress=False)
    docs = [json.loads(line) for line in (tmp_path / "out" / "corpus.jsonl").read_text().splitlines()]
    assert sorted(d["_id"] for d in docs) == ["my_notes", "new_line", "tab_here"]
    assert sorted(d["metadata"]["source"] for d in docs) == sorted(names)
    assert {r["id"] for r in rep.ids_rewritten} == {"my_notes", "new_line", "tab_here"}
    assert "3 ids with whitespace replaced by '_'" in rep.summary() and "new\\nline.md" in rep.summary()
    run_path = tmp_path / "run.trec"
    write_trec_run(Run({"q1": {d["_id"]: 1.0 / (i + 1) for i, d in enumerate(docs)}}), run_path)
    assert set(read_trec_run(run_path).scores["q1"]) == {d["_id"] for d in docs}  # main: refused the ids


def test_a_low_confidence_encoding_guess_is_reported_with_the_encoding_chosen(tmp_path):
    src = tmp_path / "docs"
    src.mkdir()
    (src / "cafe.txt").write_bytes("café".encode("cp1252"))  # the probe: read as cp1251 "cafй", no word said
    (src / "menu.txt").write_bytes("Un café au lait, s'il vous plaît.".encode("cp1252"))
    (src / "utf8.txt").write_text("Un café en UTF-8, sans doute possible.", encoding="utf-8")
    rep = ingest(src, tmp_path / "out", progress=False)
    docs = {d["_id"]: d for d in map(json.loads, (tmp_path / "out" / "corpus.jsonl").read_text().splitlines())}
    assert docs["cafe"]["text"] == "café" and docs["menu"]["text"].startswith("Un café")
    guesses = {g["path"]: g for g in rep.encoding_guesses}
    assert set(guesses) == {"cafe.txt", "menu.txt"}  # UTF-8 is certain, not a guess
    assert guesses["cafe.txt"]["encoding"] == "cp1252" and guesses["cafe.txt"]["alternatives"]
    assert all(a["encoding"] != "cp1252" and a["reads"] for a in guesses["cafe.txt"]["alternatives"])
    assert "low-confidence encoding: cafe.txt decoded as cp1252 ('café'); also fits" in rep.summary()
    assert json.loads((tmp_path / "out" / "ingest_report.json").read_text())["encoding_guesses"][0]["path"] == \
        "cafe.txt"


def test_a_file_swapped_for_a_link_out_of_src_after_the_walk_is_not_read(tmp_path, monkeypatch):
    import lab.data.ingest as ingest_module

    src, outside = tmp_path / "docs", tmp_path / "outside"
    write_doc(src / "page.md", "Page", ["An honest page."])
    write_doc(outside / "secret.md", "Secret", ["The password is swordfish."])
    real_walk = ingest_module._walk

    def walk_then_swap(*args):
        listed = real_walk(*args)
        (src / "page.md").unlink()
        os.symlink(outside / "secret.md", src / "page.md")  # the race: after the listing, before the read
        return listed

    monkeypatch.setattr(ingest_module, "_walk", walk_then_swap)
    rep = ingest(src, tmp_path / "out", progress=False)
    assert "swordfish" not in (tmp_path / "out" / "corpus.jsonl").read_text()
    assert [(s["path"], s["kind"]) for s in rep.skipped] == [("page.md", "link_outside")]


def test_a_file_name_that_is_not_utf8_is_ingested_under_an_escaped_id_and_the_rest_goes_on(tmp_path):
    """Through `lab ingest`: the name's bytes are written as \\xNN in the id, metadata and report; the other
    files are ingested; no temporary file is left; a rerun reuses both."""
    src = tmp_path / "src"
    src.mkdir()
    words = " ".join(["coffee tea cake"] * 20)
    (src / os.fsdecode(b"caf\xe9 menu.md")).write_text(f"# Menu\n\n{words}\n")
    (src / "plain.md").write_text(f"# Plain\n\n{words} plain\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAB_NO_PROGRESS": "1"}
    proc = subprocess.run([sys.executable, "-m", "lab", "ingest", str(src), "--out", str(out)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    docs = {d["_id"]: d for d in map(json.loads, (out / "corpus.jsonl").read_text(encoding="utf-8").splitlines())}
    assert set(docs) == {"caf\\xe9_menu", "plain"}, list(docs)
    assert docs["caf\\xe9_menu"]["metadata"]["source"] == "caf\\xe9 menu.md"
    report = json.loads((out / "ingest_report.json").read_text(encoding="utf-8"))
    assert report["names_escaped"] == ["caf\\xe9 menu.md"] and report["skipped"] == []
    assert "not valid UTF-8" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == [".extracted.jsonl", "corpus.jsonl", "ingest_report.json"]
    again = subprocess.run([sys.executable, "-m", "lab", "ingest", str(src), "--out", str(out)], capture_output=True,
                           text=True, cwd=REPO, env=env, timeout=300)
    assert again.returncode == 0 and "2 files reused" in again.stdout, again.stdout + again.stderr[-2000:]
