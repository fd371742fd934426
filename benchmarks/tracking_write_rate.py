"""Sustained write rate of a shared MLflow server (PostgreSQL backend) with 1, 4 and 16 concurrent loggers.

Each logger is a process (one machine's sweep worker, simulated) that creates its own run and then writes one
metric value per request (``MlflowClient.log_metric``, what a notebook's per-step logging does) as fast as the
server answers, for ``--seconds``; the rate is every logger's writes over that window. Latency is per request.
By default the script starts its own PostgreSQL + ``mlflow server`` in a temporary folder (lab.tracking.server,
what `lab server` starts); ``--url`` measures a running server instead.

    python benchmarks/tracking_write_rate.py [--loggers 1 4 16] [--seconds 20] [--url http://127.0.0.1:5000]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _logger(url: str, experiment_id: str, ready, go, window, out) -> None:
    from mlflow import MlflowClient

    cl = MlflowClient(tracking_uri=url)
    run_id = cl.create_run(experiment_id).info.run_id
    ready.put(run_id)
    go.wait()
    start, end = window[0], window[1]
    while time.time() < start:
        time.sleep(0.001)
    lat, step = [], 0
    while time.time() < end:
        t0 = time.perf_counter()
        cl.log_metric(run_id, "ndcg_at_10", 0.5, step=step)
        lat.append(time.perf_counter() - t0)
        step += 1
    out.put(lat)


def measure(url: str, n: int, seconds: float) -> dict:
    """``n`` logger processes; the window opens once every one has imported MLflow and created its run."""
    from mlflow import MlflowClient

    cl = MlflowClient(tracking_uri=url)
    exp = cl.create_experiment(f"write-rate-{n}-{int(time.time() * 1000)}")
    ctx = mp.get_context("spawn")
    ready, out, go, window = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Array("d", 2)
    procs = [ctx.Process(target=_logger, args=(url, exp, ready, go, window, out)) for _ in range(n)]
    for p in procs:
        p.start()
    run_ids = [ready.get(timeout=900) for _ in procs]
    window[0] = time.time() + 0.5
    window[1] = window[0] + seconds
    go.set()
    lats = sorted(x for _ in procs for x in out.get(timeout=600 + seconds))
    for p in procs:
        p.join()
    for run_id in run_ids:
        cl.set_terminated(run_id)
    pick = (lambda q: 1000 * lats[min(int(len(lats) * q), len(lats) - 1)]) if lats else (lambda q: float("nan"))
    return {"loggers": n, "writes": len(lats), "per_s": len(lats) / seconds, "p50_ms": pick(0.5),
            "p95_ms": pick(0.95)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running MLflow server (default: start PostgreSQL + mlflow server here)")
    ap.add_argument("--loggers", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=2, help="server worker processes when the script starts one")
    ap.add_argument("--smoke", action="store_true", help="1 logger, 0.5 s, 1 worker: checks that it runs (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.loggers, args.seconds, args.workers = [1], 0.5, 1
    server, folder = None, None
    if not args.url:
        from lab.tracking.server import start_server

        folder = Path(tempfile.mkdtemp(prefix="lab-pg-bench-"))
        folder.chmod(0o755)  # the postgres user (when run as root) must reach pgdata
        server = start_server(folder, port=_free_port(), db_port=_free_port(), workers=args.workers)
    url = args.url or server.url
    try:
        where = f"started here: PostgreSQL + mlflow server, {args.workers} workers" if server else "given"
        print(f"server {url} ({where}), {os.cpu_count()} CPUs, {args.seconds:.0f} s per measurement")
        print(f"{'loggers':>7} {'writes':>7} {'writes/s':>9} {'p50 ms':>7} {'p95 ms':>7}")
        for n in args.loggers:
            r = measure(url, n, args.seconds)
            print(f"{r['loggers']:>7} {r['writes']:>7} {r['per_s']:>9.1f} {r['p50_ms']:>7.1f} {r['p95_ms']:>7.1f}",
                  flush=True)
    finally:
        if server:
            server.stop()
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
