"""The ``http`` strategy at concurrency 16 against concurrency 1: 500 queries to a local retrieval service.

The service is our own BM25 served over HTTP by ``python -m lab.experiment.serve`` in a separate process on
127.0.0.1 (SciFact, 5,183 docs; the first 500 train queries by default). Two services: BM25 as it is (about a
millisecond of work per query, so the figures are mostly HTTP and JSON overhead on both sides) and the same with
``--delay-ms`` of simulated service time (network plus a model: what concurrency is for). For each, the same
client searches every query at concurrency 1 and 16 (in that order, then 16 again to show warm-up does not
explain the gap) and prints wall seconds, queries per second, per-request P50/P95 latency and the ratio.
Also checks that every run returns the same hits as BM25 searched in this process.

    .venv/bin/python benchmarks/http_concurrency.py [--data data/scifact] [--split train] [--n 500] [--delay-ms 20]
    .venv/bin/python benchmarks/http_concurrency.py --smoke   # ORD-QA, 16 queries: checks that it runs (CI)
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("LAB_NO_PROGRESS", "1")

from lab.data import load_dataset  # noqa: E402
from lab.metrics import latency_summary  # noqa: E402
from lab.retrievers import Context, build  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(data: str, delay_ms: float) -> tuple[subprocess.Popen, str]:
    """The BM25 service in its own process; returns (process, /retrieve URL) once /health answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lab.experiment.serve", "--dataset", data, "--strategy", "bm25",
                             "--port", str(port), "--delay-ms", str(delay_ms)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"service exited: {proc.stderr.read()}")
        try:
            urllib.request.urlopen(base + "/health", timeout=2).read()
            return proc, base + "/retrieve"
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit("service did not start in 300 s")


def measure(url: str, queries, k: int, concurrency: int, want: dict) -> dict:
    r = build("http", {"url": url, "concurrency": concurrency, "timeout": 60}, Context(progress=False))
    t0 = time.perf_counter()
    run = r.search(queries, k)
    wall = time.perf_counter() - t0
    d = r.diagnostics()
    assert d["http_failed"] == 0, r.describe()["http_first_error"]
    assert run.scores == want, "the service's hits differ from BM25 searched here"
    lat = latency_summary(run.latency)
    return {"wall": wall, "qps": len(queries) / wall, "p50": lat["latency_p50_ms"], "p95": lat["latency_p95_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/scifact")
    ap.add_argument("--split", default="train")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--smoke", action="store_true", help="ORD-QA, 16 test queries: checks that it runs (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.data, args.split, args.n = "data/ord-qa", "test", 16

    ds = load_dataset(args.data, progress=False)
    queries, _ = ds.split(args.split)
    queries = queries.subset(sorted(queries)[: args.n])
    print(f"http strategy: {len(queries)} {args.split} queries of {args.data} ({len(ds.corpus)} docs), k={args.k}; "
          f"python {platform.python_version()}, {os.cpu_count()} CPUs (shared machines vary: compare ratios)")
    bm25 = build("bm25", {}, Context(progress=False))
    bm25.index(ds.corpus)
    t0 = time.perf_counter()
    want = {q: {d: float(s) for d, s in bm25.search_one(queries[q], args.k)} for q in queries}
    print(f"reference: BM25 in this process, one query at a time: {time.perf_counter() - t0:.2f} s")

    for delay in (0.0, args.delay_ms):
        proc, url = start_service(str(Path(args.data)), delay)
        try:
            label = "BM25 service" + (f" + {delay:g} ms simulated service time" if delay else "")
            res = {}
            for tag, c in (("c1", 1), ("c16", 16), ("c16 again", 16)):
                res[tag] = m = measure(url, queries, args.k, c, want)
                print(f"  {label:<45} concurrency {c:>2}: {m['wall']:6.2f} s  {m['qps']:7.1f} queries/s  "
                      f"P50 {m['p50']:7.2f} ms  P95 {m['p95']:7.2f} ms  ({tag})")
            print(f"  -> concurrency 16 / 1: {res['c1']['wall'] / res['c16']['wall']:.1f}x faster "
                  f"({res['c1']['wall'] / res['c16 again']['wall']:.1f}x on the second run); 0 failed queries, "
                  f"hits identical to BM25")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
