"""Per-config cost of a cheap grid through Papermill against in-process: three configs of the chunk-size grid.

BM25, recursive chunker, overlap 0, sizes 256, 512 and 1,024 tokens on SciFact (span relevance), as
params/chunk_size_grid.yaml runs them: first through ``run_sweep`` (one kernel and one MLflow run per config, into
a fresh store created before the clock), then in this process (``prepare_experiment(...).result()`` one after the
other, one dataset load). Prints one JSON line for each: seconds and index_seconds per config.

    nice -n 5 .venv/bin/python scripts/papermill_vs_inprocess.py
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = f"""notebook: {REPO / 'notebooks' / '02_chunk_size_grid.ipynb'}
dataset: data/scifact
experiment: papermill_vs_inprocess
seed: 0
fixed: {{strategy: bm25, split: test, k: 100, relevance: span, chunking.size_unit: tokens,
        chunking.chunker: recursive, chunking.overlap: 0}}
grid:
  chunking.size: [256, 512, 1024]
"""


def main() -> None:
    from lab.experiment.run import load, prepare_experiment
    from lab.retrievers.base import Context
    from lab.tracking.store import client
    from lab.workbench.config import expand, load_spec
    from lab.workbench.sweep import run_sweep

    tmp = Path(tempfile.mkdtemp(prefix="pm-vs-inprocess-"))
    spec = tmp / "grid3.yaml"
    spec.write_text(SPEC)
    client(tmp / "mlruns").search_experiments()  # creating the store runs MLflow's migrations: not timed
    t0 = time.perf_counter()
    rep = run_sweep(spec, tracking_root=str(tmp / "mlruns"), output_dir=tmp / "out", progress=False, echo=None,
                    summary=False)
    total = time.perf_counter() - t0
    if not rep.ok:
        raise SystemExit([o.error for o in rep.outcomes if o.error])
    cl = client(tmp / "mlruns")
    rows = [{"label": o.label, "seconds": round(o.seconds, 2),
             "index_seconds": cl.get_run(o.run_id).data.metrics.get("index_seconds")} for o in rep.outcomes]
    print(json.dumps({"papermill_total": round(total, 2), "configs": rows}), flush=True)
    ds = load(REPO / "data" / "scifact", progress=False)
    rows = []
    for c in expand(load_spec(spec)):
        t0 = time.perf_counter()
        r = prepare_experiment(ds, c["strategy"], c.get("params") or {}, split="test", k=100,
                               chunking=c["chunking"], relevance="span",
                               ctx=Context(cache_dir=REPO / ".cache", progress=False)).result()
        rows.append({"size": c["chunking"]["size"], "seconds": round(time.perf_counter() - t0, 2),
                     "index_seconds": round(r.index_seconds, 2)})
    print(json.dumps({"in_process": rows}), flush=True)


if __name__ == "__main__":
    main()
