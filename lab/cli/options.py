"""Options shared by every `lab` command: one spelling, one check, one error format.

- Counts (``--k``, ``--max-queries``, ``--n``, ``--depth``, ``--top-n``, ``--jobs``, ...) are integers >= 1:
  :func:`positive_int` refuses 0 and negatives at parse time, before any work starts (0 would mean "nothing").
  Options where 0 has a meaning of its own (``--threads 0``: the library's default) use :func:`non_negative_int`.
- The MLflow store is ``--tracking-root`` on every command (:func:`add_tracking_root`; ``args.tracking_root``).
  ``--root`` and ``--mlflow-root``, the older spellings, are kept as hidden aliases.
- ``--max-consecutive-failures`` (:func:`add_max_consecutive_failures`) on every command that generates or judges
  with an LLM.
- :class:`Parser` prints a bad option as one line, ``error: lab run: argument --k: ... (see lab run --help)``,
  and exits 2, like every other user error of raglab (no usage block, no traceback).
"""
from __future__ import annotations

import argparse
import sys

#: Hidden aliases of ``--tracking-root`` (older spellings, kept so scripts keep working).
TRACKING_ROOT_ALIASES = ("--root", "--mlflow-root")


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr and exit status 2 (subparsers inherit the class)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        print(f"error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _int(text: str, low: int, what: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int(text, 1, "an integer >= 1")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int(text, 0, "an integer >= 0")


def add_tracking_root(parser, help: str = "MLflow tracking root: a folder (relative to the repo root) or a URI "
                                          "(default mlruns)", default: str | None = "mlruns") -> None:
    """``--tracking-root`` (dest ``tracking_root``) plus its hidden aliases ``--root`` and ``--mlflow-root``."""
    parser.add_argument("--tracking-root", dest="tracking_root", default=default, metavar="ROOT", help=help)
    parser.add_argument(*TRACKING_ROOT_ALIASES, dest="tracking_root", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def add_max_consecutive_failures(parser) -> None:
    """``--max-consecutive-failures N``: LLM calls failed in a row (each after its retries) that stop a generation
    or judging run (see lab.models.breaker)."""
    from lab.models.breaker import DEFAULT_MAX_CONSECUTIVE_FAILURES

    parser.add_argument("--max-consecutive-failures", type=positive_int, default=DEFAULT_MAX_CONSECUTIVE_FAILURES,
                        metavar="N", help="stop after N LLM calls in a row failed (each after its retries); what was "
                        f"finished is kept (default {DEFAULT_MAX_CONSECUTIVE_FAILURES})")
