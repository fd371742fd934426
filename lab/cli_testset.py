"""`lab testset ...`: test-set tools. On main now: `perturb` (robustness variants, lab.perturb). Generation with
quality gates, spot check, log import and annotation (issue 6, routes A-C) are not merged yet."""


def add_parsers(sub) -> None:
    """Add `lab testset` and its subcommands to the `lab` parser's subparsers."""
    from lab.perturb import add_parser

    t = sub.add_parser("testset", help="test-set tools: robustness variants (perturb)")
    tsub = t.add_subparsers(dest="testset_command", required=True, metavar="COMMAND")
    add_parser(tsub)
