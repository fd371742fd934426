"""Options shared by every `lab` command: one spelling, one check, one error format.

- Counts (``--k``, ``--max-queries``, ``--n``, ``--depth``, ``--top-n``, ``--jobs``, ...) are integers >= 1:
  :func:`positive_int` refuses 0 and negatives at parse time, before any work starts (0 would mean "nothing").
  Options where 0 has a meaning of its own (``--threads 0``: the library's default) use :func:`non_negative_int`.
- The MLflow store is ``--tracking-root`` on every command (:func:`add_tracking_root`; ``args.tracking_root``).
  ``--root`` and ``--mlflow-root``, the older spellings, are kept as hidden aliases.
- ``--max-consecutive-failures`` (:func:`add_max_consecutive_failures`) on every command that generates or judges
  with an LLM.
- Lists of names (``--metric``, ``--metrics``, ``--publish-metrics``) may be given space or comma separated
  (:func:`split_names`); `lab evaluate` and `lab run` check their ``--metrics`` names before any work starts
  (:func:`checked_metrics`).
- Settings ``--set key=value`` are read by :func:`lab.core.settings.parse_settings`; tables (``--per-query
  FILE``) are written by :func:`write_table`, the format chosen by the file's suffix.
- :class:`Parser` prints a bad option as one line, ``error: lab run: argument --k: ... (see lab run --help)``,
  and exits 2, like every other user error of raglab (no usage block, no traceback).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lab.core.atomic import atomic_path
from lab.core.errors import ConfigError
from lab.metrics.ranking import parse_metric
from lab.models.breaker import DEFAULT_MAX_CONSECUTIVE_FAILURES

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


def unit_float(text: str) -> float:
    """argparse type: a number in [0, 1] (a share or a cosine threshold)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value:g}")
    return value


def add_tracking_root(parser, help: str = "MLflow tracking root: a folder (relative to the repo root) or a URI "
                                          "(default mlruns)", default: str | None = "mlruns") -> None:
    """``--tracking-root`` (dest ``tracking_root``) plus its hidden aliases ``--root`` and ``--mlflow-root``. The
    default "mlruns" gives way to ``MLFLOW_TRACKING_URI`` when that is set (e.g. ``http://host:5000``, a shared
    server: see docs/scale-out.md)."""
    if default == "mlruns" and os.environ.get("MLFLOW_TRACKING_URI"):
        default = os.environ["MLFLOW_TRACKING_URI"]
    parser.add_argument("--tracking-root", dest="tracking_root", default=default, metavar="ROOT", help=help)
    parser.add_argument(*TRACKING_ROOT_ALIASES, dest="tracking_root", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def add_max_consecutive_failures(parser) -> None:
    """``--max-consecutive-failures N``: LLM calls failed in a row (each after its retries) that stop a generation
    or judging run (see lab.models.breaker)."""
    parser.add_argument("--max-consecutive-failures", type=positive_int, default=DEFAULT_MAX_CONSECUTIVE_FAILURES,
                        metavar="N", help="stop after N LLM calls in a row failed (each after its retries); what was "
                        f"finished is kept (default {DEFAULT_MAX_CONSECUTIVE_FAILURES})")


def split_names(values) -> list[str] | None:
    """Names given to an ``nargs="+"`` option, each value split at commas and spaces (``--metric ndcg@10,mrr@10``
    and ``--metric ndcg@10 mrr@10`` are the same); None when none were given."""
    return [n for v in values or [] for n in v.replace(",", " ").split()] or None


def checked_metrics(values, option: str = "--metrics") -> list[str] | None:
    """The names of a metrics option, split like :func:`split_names`, each checked by
    :func:`lab.metrics.ranking.parse_metric` (a ConfigError naming ``option`` and the bad name); None when none
    were given."""
    if not values:
        return None
    names = [n for v in values for n in v.replace(",", " ").split()]
    for name in names:
        try:
            parse_metric(name)
        except ValueError as exc:
            raise ConfigError(f"{option} {exc}") from None
    return names


def write_table(df, path) -> None:
    """Write a table (a pandas DataFrame, e.g. a per-query table) to ``path`` by its suffix: .parquet, .json
    (records keyed by index), .tsv, else CSV; parent folders are created."""
    path = Path(path)
    with atomic_path(path) as tmp:  # no 0-byte or half table left behind
        if path.suffix == ".parquet":
            df.to_parquet(tmp)
        elif path.suffix == ".json":
            df.to_json(tmp, orient="index", indent=1)
        else:
            df.to_csv(tmp, sep="\t" if path.suffix == ".tsv" else ",")


#: The --correction values of `lab compare` and `lab report` (lab.metrics.stats.CORRECTIONS; kept here so building
#: the parser imports no numpy).
CORRECTION_CHOICES = ("none", "holm", "bh")


def correction_choice(text: str) -> str:
    """argparse type of --correction: none|holm|bh (any case)."""

    value = str(text).strip().lower()
    if value not in CORRECTION_CHOICES:
        raise argparse.ArgumentTypeError(f"expected one of {'|'.join(CORRECTION_CHOICES)}, got {text!r}")
    return value


def add_correction_option(p, reference: str = "the best run") -> None:
    """``--correction none|holm|bh`` (dest ``correction``; None: automatic), shared by `lab compare` and
    `lab report`."""
    p.add_argument("--correction", type=correction_choice, default=None, metavar="none|holm|bh",
                   help="adjust the p-values of the paired tests for multiple comparisons against "
                   f"{reference}: none, holm (Holm 1979 step-down, family-wise error rate) or bh "
                   "(Benjamini-Hochberg 1995, false discovery rate). Default: holm when more than one run is tested "
                   f"against {reference} (more than two rows), none otherwise. Significant: adjusted p < alpha")
