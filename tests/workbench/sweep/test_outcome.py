"""lab.workbench.sweep.outcome: a sweep's report counts its configs' outcomes and is ok only when every config has a
finished run and publishing (when asked) worked."""
from __future__ import annotations

from pathlib import Path

from lab.workbench.sweep import ConfigOutcome, SweepReport


def _report(*statuses: str, **more) -> SweepReport:
    outcomes = [ConfigOutcome(i, f"h{i}", f"c{i}", {}, s, run_id=f"r{i}") for i, s in enumerate(statuses)]
    return SweepReport("grid", "exp", "1", "p", Path("out"), outcomes=outcomes, **more)


def test_counts_and_ok():
    rep = _report("FINISHED", "SKIPPED", "FAILED", "KILLED")
    assert (rep.n_finished, rep.n_skipped, rep.n_failed) == (1, 1, 2) and not rep.ok
    assert _report("FINISHED", "SKIPPED").ok
    assert not _report("FINISHED", publish_error="push refused").ok


def test_table_and_summary_name_every_config():
    rep = _report("FINISHED", "FAILED", seconds=3.14159)
    table = rep.table()
    assert list(table["status"]) == ["FINISHED", "FAILED"] and list(table["run_id"]) == ["r0", "r1"]
    assert rep.summary() == ("sweep 'grid' (exp): 2 configs, 1 finished, 1 failed, 0 skipped (finished earlier) "
                             "in 3.1 s; parent run p")
    dry = _report("PENDING", "SKIPPED", dry_run=True)
    assert dry.summary() == "dry run: sweep 'grid' (exp): 2 configs, 1 would run, 1 finished earlier (skipped)"
