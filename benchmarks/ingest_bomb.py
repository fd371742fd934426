"""`lab ingest` on a DOCX bomb: seconds and peak memory of the ingest, and what the report says about the bomb.

A real DOCX (python-docx) has its word/document.xml replaced by one paragraph of --inflate-mb MiB of one letter
(a few hundred KiB on disk; with --random, paragraphs of random hex words that pass the ratio check) and sits in
a temporary folder beside one markdown page; the ingest runs on it in a child process, which prints its own peak
RSS (VmHWM). Without the limits a 1 GB bomb took
3.7 GB RSS and 3 min 51 s before "extraction failed (MemoryError)".

Run: .venv/bin/python benchmarks/ingest_bomb.py [--inflate-mb 1024] [--random]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

CHILD = ("import json, resource, sys\nfrom lab.data.ingest import ingest\n"
         "rep = ingest(sys.argv[1], sys.argv[2], progress=False)\n"
         "print(json.dumps({'rss_mib': next(int(l.split()[1]) for l in open('/proc/self/status')"
         " if l.startswith('VmHWM:')) / 1024,"
         " 'skipped': rep.skipped, 'documents': rep.documents}))\n")


def docx_bomb(path: Path, inflate_mb: int, random_text: bool = False) -> Path:
    import docx

    plain = path.with_suffix(".plain.docx")
    d = docx.Document()
    d.add_paragraph("placeholder")
    d.save(str(plain))
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if item.filename != "word/document.xml":
                zout.writestr(item, zin.read(item.filename))
        with zout.open("word/document.xml", "w", force_zip64=True) as fh:
            fh.write(b'<?xml version="1.0" encoding="UTF-8"?>\n<w:document xmlns:w="http://schemas.openxmlformats'
                     b'.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>')
            for _ in range(inflate_mb):
                fh.write(_random_paragraphs() if random_text else b"a" * (1 << 20))
            fh.write(b"</w:t></w:r></w:p></w:body></w:document>")
    plain.unlink()
    return path


def _random_paragraphs() -> bytes:
    """About 1 MiB of paragraphs of 64 random hex words each."""
    paragraphs = (b" ".join(os.urandom(8).hex().encode() for _ in range(64)) for _ in range(1 << 10))
    return b"</w:t></w:r></w:p><w:p><w:r><w:t>".join(paragraphs) + b"</w:t></w:r></w:p><w:p><w:r><w:t>"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inflate-mb", type=int, default=1024)
    ap.add_argument("--random", action="store_true", help="paragraphs of random hex words (about 2x compressible: "
                    "passes the ratio check, so the size limits and the parser's memory are what is measured)")
    ap.add_argument("--smoke", action="store_true", help="a 16 MiB bomb: checks that the script runs (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.inflate_mb = 16
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "docs"
        src.mkdir()
        bomb = docx_bomb(src / "bomb.docx", args.inflate_mb, args.random)
        (src / "page.md").write_text("# A page\n\nAn ordinary page beside the bomb.\n")
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, str(src), str(Path(tmp) / "out")], capture_output=True,
                              text=True, check=True)
        seconds = time.perf_counter() - t0
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"bomb: {bomb.stat().st_size / 1024:,.0f} KiB on disk, document.xml inflates to {args.inflate_mb:,} MiB")
        print(f"ingest: {seconds:.1f} s, peak RSS {got['rss_mib']:,.0f} MiB, {got['documents']} documents")
        for s in got["skipped"]:
            print(f"skipped {s['path']} ({s['kind']}): {s['reason']}")


if __name__ == "__main__":
    main()
