"""`lab testset grade SHEET`: the local grading page (lab.testset.grade_server over lab.testset.grading), and the
two-grader import (`lab testset import-annotation --graders A,B`, lab.testset.graders)."""
from __future__ import annotations

import json
import sys
import webbrowser

from lab.core.errors import ConfigError
from lab.testset.grade_server import start_server
from lab.testset.graders import import_graded
from lab.testset.grading import open_grading


def cmd_grade(args) -> int:
    if args.port is not None and not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: give a TCP port between 1 and 65535 (or omit it for a free one)")
    grading = open_grading(args.sheet, grader=args.grader, arbitrate=args.arbitrate)
    what = "disagreements" if grading.mode == "arbitrate" else "rows"
    if grading.first_ungraded() is None:
        if grading.total == 0 and grading.mode == "arbitrate":
            print(f"the two graders agree on every row both graded: nothing to arbitrate in {args.sheet}")
        else:
            print(f"all {grading.total} {what} of {grading.sheet.path} are graded; nothing left to grade")
        return 0
    server = start_server(grading, port=args.port or 0)
    who = f" (grader {args.grader}, grades in {grading.sheet.path})" if args.grader else (
        f" ({grading.total} disagreements; grades in {grading.sheet.path})" if args.arbitrate else "")
    print(f"grading {args.sheet}{who}: {grading.graded_count()} of {grading.total} {what} graded; open\n"
          f"  {server.url}\n(every grade is saved at once; Ctrl-C to stop)", flush=True)
    if not args.no_browser:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    print(f"stopped: {grading.graded_count()} of {grading.total} {what} graded, saved in {grading.sheet.path}",
          file=sys.stderr)
    return 0


def cmd_import_graded(args) -> int:
    """import-annotation with --graders: the agreement printed first, then the qrels written."""
    echo = None if args.json else print
    rep = import_graded(args.sheet, args.graders, args.out, dataset=args.dataset, chunking=args.chunking,
                        split=args.split, tracking_root=None if args.no_mlflow else args.tracking_root,
                        experiment=args.experiment, progress=not args.no_progress and not args.json, echo=echo)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        print(f"{rep['judged']} agreed or arbitrated rows for {rep['queries']} queries; grades {rep['grades']}; "
              f"written to {rep['folder']} (qrels/{args.split}.tsv, tiers.json; provenance.json records the "
              "agreement)")
    return 0


def add_grade_parser(tsub) -> None:
    """``lab testset grade``."""
    g = tsub.add_parser("grade", help="grade a sheet (export-annotation or export-review) in a local page, one key "
                                      "per grade; two graders and an arbiter")
    g.add_argument("sheet", help="the sheet.csv of `lab testset export-annotation` or `export-review`")
    who = g.add_mutually_exclusive_group()
    who.add_argument("--grader", help="grade your own copy, SHEET-STEM.grader-NAME.csv (made on the first start "
                                      "with the grades cleared): two graders each grade the same sheet blind")
    who.add_argument("--arbitrate", action="store_true",
                     help="show only the rows the two graders graded differently, with both grades, to a third "
                          "person; grades go to SHEET-STEM.arbiter.csv")
    g.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    g.add_argument("--no-browser", action="store_true", help="print the URL only; do not open a browser")
    g.set_defaults(func=cmd_grade)
