"""MLflow records of the test-set commands: one run per generation, review import, log import or annotation step.

Conventions: experiment "testset" by default, in the store of ``lab.tracking.store`` (``mlruns/`` at the repo root).
Params are flattened (dotted keys), metrics are plain numbers (``@`` mapped by lab.tracking.store), tags carry the
kind of step, the dataset fingerprints and the environment (git commit, package versions). Artifacts: the
files named, under ``testset/`` (a folder is logged whole, except files over ``max_artifact_mb``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from lab.core.flat import flatten
from lab.tracking.lifecycle import tracked_run

EXPERIMENT = "testset"


def log_testset_run(kind: str, name: str, params: Mapping, metrics: Mapping[str, float], tags: Mapping | None = None,
                    artifacts: Iterable[str | Path] = (), tracking_root: str | Path = "mlruns",
                    experiment: str = EXPERIMENT, max_artifact_mb: float = 50.0) -> str:
    """Create a FINISHED run named ``name`` holding ``params``, ``metrics``, ``tags`` (+ kind, environment) and
    ``artifacts`` (files or folders); returns its run id. A step that raises ends the run FAILED with tag
    ``error`` (lab.tracking.lifecycle)."""
    with tracked_run(experiment, run_name=name, tracking_root=tracking_root, environment=True,
                     tags={"testset.kind": kind, **dict(tags or {})}) as run:
        run_id = run.run_id
        run.log_params(dict(flatten(dict(params))))
        run.log_metrics({k: float(v) for k, v in metrics.items() if v is not None})
        limit = max_artifact_mb * 1024 * 1024
        for a in artifacts:
            p = Path(a)
            files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else []
            for f in files:
                if f.stat().st_size > limit:
                    continue
                sub = "testset" if p.is_file() else str(Path("testset") / f.parent.relative_to(p.parent))
                run.log_artifact(f, sub)
    return run_id
