"""lab.workbench.sweep.options: each sweep option declared once; keywords checked against it; `lab sweep`'s flags
made from it."""
from __future__ import annotations

import contextlib
import io
from dataclasses import fields

import pytest

from lab.cli.main import main
from lab.core.errors import ConfigError
from lab.workbench.sweep import SweepOptions, sweep_options
from lab.workbench.sweep.options import cli_fields


def test_keywords_set_fields_and_unknown_ones_are_refused_by_name():
    opts = sweep_options(jobs=3, tracking_root="elsewhere")
    assert (opts.jobs, opts.tracking_root, opts.executor) == (3, "elsewhere", "local")
    with pytest.raises(ConfigError, match="sweep option 'job' does not exist; the options are: .*jobs"):
        sweep_options(job=3)


@pytest.mark.parametrize(("given", "message"), [({"executor": "slurm"}, "executor 'slurm': use 'local' or 'ray'"),
                                                ({"jobs": 0}, "jobs=0: must be at least 1")])
def test_bad_values_are_refused_with_what_is_accepted(given, message):
    with pytest.raises(ConfigError, match=message):
        sweep_options(**given)


def test_a_base_is_kept_and_keywords_win_and_no_echo_is_silent():
    base = SweepOptions(jobs=2, dry_run=True)
    opts = sweep_options(base, jobs=4, echo=None)
    assert (opts.jobs, opts.dry_run) == (4, True) and base.jobs == 2
    assert opts.echo("anything") is None  # callable, prints nothing


def test_every_flag_of_lab_sweep_comes_from_a_field_with_its_help():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(out.getvalue().split())
    flagged = cli_fields()
    assert {f.name for f in flagged} == {"jobs", "executor", "dry_run", "ray_address", "output_dir", "progress",
                                         "execution_timeout", "rerun_on_code_change", "holdout"}
    for f in flagged:
        assert f.metadata["flag"] in text
        help_text = " ".join(f.metadata.get("flag_help", f.metadata["help"]).split())
        assert help_text[:40] in text, f.name
    assert all(f.metadata.get("help") for f in fields(SweepOptions))  # every option says what it means
