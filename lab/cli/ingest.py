"""`lab ingest SRC --out DIR [--strict]`: a folder of documents into a BEIR corpus (lab.data.ingest).

Exit status: 0 when the corpus was written (skipped files are listed, not fatal); 1 with ``--strict`` when any
file was skipped (the corpus and report are still written, so the listing can be read); 2 on bad arguments
(SRC missing, DIR unusable, two files with the same id), before any document is read.
"""
from __future__ import annotations

import json


def cmd_ingest(args) -> int:
    from lab.data.ingest import ingest
    from lab.core.errors import ConfigError

    if not args.src:
        raise ConfigError("lab ingest: give the folder to read, e.g. lab ingest docs/ --out data/my-docs")
    if not args.out:
        raise ConfigError("lab ingest: give --out DIR, the folder for corpus.jsonl and ingest_report.json")
    report = ingest(args.src, args.out, exclude=args.exclude or (), progress=not args.no_progress and not args.json)
    print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False) if args.json else report.summary())
    if args.strict and report.skipped:
        if not args.json:
            print(f"--strict: {len(report.skipped)} files were skipped (exit 1)")
        return 1
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("ingest", help="read a folder of .md .rst .txt .html .pdf .docx files into a BEIR corpus")
    p.add_argument("src", nargs="?", metavar="SRC", help="folder of documents, read recursively")
    p.add_argument("--out", metavar="DIR", help="folder for corpus.jsonl and ingest_report.json "
                   "(a rerun into it re-reads only changed files)")
    p.add_argument("--exclude", action="append", metavar="GLOB",
                   help="skip files whose relative path or name matches (repeatable), e.g. --exclude SOURCE.md")
    p.add_argument("--strict", action="store_true", help="exit 1 when any file was skipped")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_ingest)
