"""Every config of a sweep spec, scored in this process, to full precision: record them, or compare two records.

Record: for each config (or those of the strategies named), ``prepare_experiment(...).result()`` on all the split's
queries; written as JSON keyed by the config (strategy, params, chunking): every metric mean as ``repr`` (all its
digits), sha256 of the per-query table and of the run (doc ids and ``repr`` of scores), the number of units indexed,
and the seconds taken. Compare: every field of every config of A against B but the seconds; exit 1 on a difference.
Used to check that a speed-up changes no score (docs/results.md).

    python scripts/config_scores.py record params/chunk_size_grid.yaml before.json [--only bm25,dense]
    python scripts/config_scores.py compare before.json after.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

FIELDS = ("means", "per_query", "run", "n_units")


def record(spec_path: str, out_path: str, only: list[str] | None = None) -> None:
    from lab.experiment.run import load, prepare_experiment
    from lab.retrievers.base import Context
    from lab.workbench.config import expand, load_spec

    out, datasets = {}, {}
    for c in expand(load_spec(spec_path)):
        if only and c["strategy"] not in only:
            continue
        ds = datasets.setdefault(c["dataset"], load(c["dataset"], progress=False))
        ctx = Context(cache_dir=Path(".cache"), seed=int(c.get("seed", 0) or 0), progress=False)
        t0 = time.perf_counter()
        r = prepare_experiment(ds, c["strategy"], c.get("params") or {}, split=c.get("split", "test"),
                               k=int(c.get("k", 100)), chunking=c.get("chunking"),
                               relevance=c.get("relevance", "auto"), ctx=ctx).result()
        run = json.dumps({q: sorted((d, repr(s)) for d, s in r.run.scores[q].items()) for q in sorted(r.run.scores)})
        table = r.evaluation.per_query.sort_index().to_csv(float_format="%r")
        key = json.dumps({k: c.get(k) for k in ("strategy", "params", "chunking")}, sort_keys=True)
        out[key] = {"means": {m: repr(float(v)) for m, v in r.evaluation.means.items()},
                    "per_query": hashlib.sha256(table.encode()).hexdigest(),
                    "run": hashlib.sha256(run.encode()).hexdigest(), "n_units": r.info["n_units"],
                    "seconds": time.perf_counter() - t0}
        print(key, out[key]["means"].get("ndcg@10"), f"{out[key]['seconds']:.1f} s", flush=True)
        tmp = Path(out_path).with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(out_path)


def compare(a_path: str, b_path: str) -> int:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    bad = 0
    for key, row in a.items():
        other = b.get(key)
        for f in FIELDS:
            if other is None or row[f] != other[f]:
                bad += 1
                print(f"differs: {key} {f}")
    print(f"{len(a)} configs compared on {', '.join(FIELDS)}: {bad} differences")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("spec")
    r.add_argument("out")
    r.add_argument("--only", help="comma-separated strategies")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.spec, args.out, args.only.split(",") if args.only else None)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
