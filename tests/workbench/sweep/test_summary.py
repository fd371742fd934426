"""lab.workbench.sweep.summary: publishing is reported on the sweep's report, never raised; nothing to publish is
said; a spec that asks for nothing publishes nothing."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from lab.workbench.sweep import ConfigOutcome, SweepReport, publish_report


def _report(status: str) -> SweepReport:
    return SweepReport("grid", "exp", "1", "p", Path("out"),
                       outcomes=[ConfigOutcome(0, "h", "c", {}, status, run_id="r0" if status != "FAILED" else None)])


def test_no_finished_run_is_a_publish_error_not_an_exception(tmp_path):
    said: list[str] = []
    spec = SimpleNamespace(publish={"prometheus": str(tmp_path / "m.prom")}, experiment="exp", repo_root=tmp_path)
    rep = _report("FAILED")
    publish_report(rep, spec, None, tmp_path / "mlruns", echo=said.append)
    assert rep.publish_error == "no finished run to publish" and said == ["publish: no finished run to publish"]
    assert not rep.ok and not (tmp_path / "m.prom").exists()


def test_nothing_asked_nothing_published(tmp_path):
    rep = _report("FINISHED")
    publish_report(rep, SimpleNamespace(publish=None, experiment="exp", repo_root=tmp_path), {"pushgateway": None},
                   tmp_path / "mlruns", echo=None)
    assert rep.published == [] and rep.publish_error == "" and rep.ok
