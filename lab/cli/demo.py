"""`lab demo` (`make demo`): the strategy-comparison sweep on SciFact, its leaderboard, charts, and where to browse
them; a thin command over lab.workbench.demo.run_demo."""
from __future__ import annotations

from lab.cli.options import add_tracking_root, positive_int
from lab.workbench.demo import DEFAULT_OUT, DEFAULT_SPEC, run_demo


def cmd_demo(args) -> int:
    res = run_demo(args.spec, tracking_root=args.tracking_root, out_dir=args.out, metric=args.metric, jobs=args.jobs,
                   progress=not args.no_progress)
    return 0 if res.ok and not res.leaderboard.empty else 1


def add_parsers(sub) -> None:
    """Add the `demo` subcommand to an argparse subparsers object."""
    d = sub.add_parser("demo", help="run the strategy comparison on SciFact, print the leaderboard, chart it")
    d.add_argument("--spec", default=DEFAULT_SPEC, help=f"sweep spec (default {DEFAULT_SPEC})")
    add_tracking_root(d)
    d.add_argument("--out", default=DEFAULT_OUT, help=f"folder for the charts and CSV (default {DEFAULT_OUT})")
    d.add_argument("--metric", default="ndcg@10")
    d.add_argument("--jobs", type=positive_int, default=1, help="configs run at once")
    d.add_argument("--no-progress", action="store_true")
    d.set_defaults(func=cmd_demo)
