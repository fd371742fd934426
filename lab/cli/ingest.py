"""`lab ingest SRC --out DIR [--strict]`: a folder of documents into a BEIR corpus (lab.data.ingest).

Exit status: 0 when the corpus was written (skipped files are listed, not fatal); 1 with ``--strict`` when any
file was skipped (the corpus and report are still written, so the listing can be read); 2 on bad arguments
(SRC missing, DIR unusable, a limit out of range), before any document is read. Two files with the same id no
longer stop the ingest: both are kept under ids with their extensions, and the report lists the collision.
"""
from __future__ import annotations

import json

from lab.core.errors import ConfigError
from lab.data.cleanup import BOILERPLATE_SHARE
from lab.data.extract import Limits
from lab.data.ingest import ingest

LIMIT_OPTIONS = ("max_text_mb", "max_pdf_mb", "max_pdf_pages", "max_docx_mb", "max_unzipped_mb", "max_zip_ratio")


def cmd_ingest(args) -> int:
    if not args.src:
        raise ConfigError("lab ingest: give the folder to read, e.g. lab ingest docs/ --out data/my-docs")
    if not args.out:
        raise ConfigError("lab ingest: give --out DIR, the folder for corpus.jsonl and ingest_report.json")
    limits = _limits(args)
    if not 0 <= args.boilerplate_share <= 1:
        raise ConfigError(f"lab ingest: --boilerplate-share {args.boilerplate_share:g}: give a share from 0 (keep "
                          "every block) to 1")
    if args.min_words < 0:
        raise ConfigError(f"lab ingest: --min-words {args.min_words}: give 0 (keep all) or a positive count")
    report = ingest(args.src, args.out, exclude=args.exclude or (), progress=not args.no_progress and not args.json,
                    limits=limits, min_words=args.min_words, dedupe=args.dedupe,
                    boilerplate_share=args.boilerplate_share)
    print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False) if args.json else report.summary())
    if args.strict and report.skipped:
        if not args.json:
            print(f"--strict: {len(report.skipped)} files were skipped (exit 1)")
        return 1
    return 0


def _limits(args):
    values = {}
    for name in LIMIT_OPTIONS:
        value = getattr(args, name)
        if not value > 0:
            raise ConfigError(f"lab ingest: --{name.replace('_', '-')} {value:g}: give a positive number")
        values[name] = value
    return Limits(**values)


def add_parsers(sub) -> None:
    d = Limits()
    p = sub.add_parser("ingest", help="read a folder of .md .rst .txt .html .pdf .docx files into a BEIR corpus")
    p.add_argument("src", nargs="?", metavar="SRC", help="folder of documents, read recursively")
    p.add_argument("--out", metavar="DIR", help="folder for corpus.jsonl and ingest_report.json "
                   "(a rerun into it re-reads only changed files)")
    p.add_argument("--exclude", action="append", metavar="GLOB",
                   help="skip files whose relative path or name matches (repeatable), e.g. --exclude SOURCE.md")
    p.add_argument("--strict", action="store_true", help="exit 1 when any file was skipped")
    p.add_argument("--min-words", type=int, default=0, metavar="N",
                   help="skip documents with fewer than N words (default 0: keep all; under 50 are always reported)")
    p.add_argument("--dedupe", action="store_true",
                   help="drop one document of each near-duplicate pair, keeping text formats (md rst txt html) first")
    p.add_argument("--boilerplate-share", type=float, default=BOILERPLATE_SHARE, metavar="F",
                   help="drop blocks repeated in at least this share of the HTML pages (and 5 of them) as site "
                        f"boilerplate (default {BOILERPLATE_SHARE}; 0 keeps every block)")
    for name, unit, help_ in (("max_text_mb", "MiB", "largest .md .rst .txt .html file, and extracted text"),
                              ("max_pdf_mb", "MiB", "largest PDF file"), ("max_pdf_pages", "", "most PDF pages"),
                              ("max_docx_mb", "MiB", "largest DOCX file"),
                              ("max_unzipped_mb", "MiB", "largest total a DOCX may inflate to"),
                              ("max_zip_ratio", "x", "highest compression ratio of a DOCX part over 1 MiB")):
        kind = int if name == "max_pdf_pages" else float
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(d, name), metavar="N",
                       help=f"{help_}; larger files are skipped with the reason (default {getattr(d, name):g}{unit})")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_ingest)
