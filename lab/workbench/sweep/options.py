"""The options of a sweep, declared once: :class:`SweepOptions` is what :func:`lab.workbench.sweep.run_sweep` takes
as keywords and what ``lab sweep`` turns into flags (a field with a ``flag`` in its metadata is one; its ``help`` is
the flag's help and the field's documentation). :func:`sweep_options` validates keywords against the fields."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from lab.core.errors import ConfigError

EXECUTORS = ("local", "ray")


def _opt(default: Any, help: str, flag: str | None = None, **more: Any) -> Any:  # noqa: A002 - argparse's word
    """A field of :class:`SweepOptions`: its default, what it means, and the ``lab sweep`` flag that sets it."""
    return field(default=default, metadata={"help": help, "flag": flag, **more})


@dataclass
class SweepOptions:
    """How a sweep runs; everything but the spec. Each field's metadata says what it means (``help``) and which
    ``lab sweep`` flag sets it (``flag``; fields without one are for callers in Python)."""

    jobs: int = _opt(1, "configs run at once (processes or Ray tasks)", "--jobs", type="positive_int")
    executor: str = _opt("local", "where configs run: 'local' (this process or a pool) or 'ray'", "--executor",
                         choices=EXECUTORS)
    dry_run: bool = _opt(False, "print the configs and which would be skipped (and why the others run); run nothing",
                         "--dry-run")
    ray_address: str | None = _opt(
        None, "an existing Ray cluster, HOST:PORT of its head (`ray start --head`); the token of a cluster with token "
        "authentication is read from ~/.ray/auth_token (or RAY_AUTH_TOKEN); default: a local instance, 2 CPUs. See "
        "docs/scale-out.md", "--ray-address")
    tracking_root: str | Path = _opt("mlruns",
                                     "the tracking store: a folder or an http(s):// server (lab.tracking.store)")
    output_dir: str | Path | None = _opt(None, "executed notebooks (default results/sweeps/<name>)", "--output-dir")
    progress: bool = _opt(True, "a progress bar over the configs", "--no-progress", invert=True,
                          flag_help="no progress bar: plain status lines (also when the output is not a terminal)")
    kernel_name: str | None = _opt(None, "the Jupyter kernel (default: the one that runs this interpreter)")
    execution_timeout: int | None = _opt(None, "seconds per notebook cell (default: no limit)", "--timeout",
                                         type="positive_int")
    echo: Callable[..., object] = _opt(print, "where dry-run and status lines go (None: silent)")
    publish: dict | None = _opt(None, "keys of the spec's publish mapping (prometheus, pushgateway, job, metrics, "
                                      "headers_env) that override or add to the spec's")
    summary: bool = _opt(True, "log the leaderboard charts and the HTML report into the parent run")
    rerun_on_code_change: bool = _opt(
        False, "also run a config again when the code (git commit) changed since its finished run (data, models and "
        "metrics version always count)", "--rerun-on-code-change")
    parent_tags: dict | None = _opt(None, "extra tags of the parent run")
    new_parent: bool = _opt(False, "always create a new parent run, even when every config is reused")
    defer_publish: bool = _opt(False, "do not publish here: the caller publishes once it has checked the outcome")
    warm_kernels: bool = _opt(True, "start the next config's kernel while the current config runs")
    holdout: float | None = _opt(
        None, "hold out this share of the queries (0 < FRACTION < 0.9, seeded by the spec's seed; overrides the "
        "spec's holdout key): rank on the dev queries, then score the winner on the held-out ones", "--holdout",
        type="float", metavar="FRACTION")


def sweep_options(base: SweepOptions | None = None, **given: Any) -> SweepOptions:
    """``base`` (default: the defaults) with the keywords ``given`` set, checked: an unknown keyword, an executor
    other than local/ray or fewer than one job is a ConfigError naming the option and what it accepts."""
    names = {f.name for f in fields(SweepOptions)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise ConfigError(f"sweep option {unknown[0]!r} does not exist; the options are: {', '.join(sorted(names))}")
    opts = replace(base or SweepOptions(), **given)
    if opts.echo is None:
        opts.echo = _silent
    if opts.executor not in EXECUTORS:
        raise ConfigError(f"executor {opts.executor!r}: use 'local' or 'ray'")
    if opts.jobs < 1:
        raise ConfigError(f"jobs={opts.jobs}: must be at least 1")
    return opts


def _silent(*args: object, **kwargs: object) -> None:
    """The ``echo`` of a silent sweep."""


def cli_fields() -> list:
    """The fields of :class:`SweepOptions` that ``lab sweep`` has a flag for, in declaration order."""
    return [f for f in fields(SweepOptions) if f.metadata.get("flag")]
