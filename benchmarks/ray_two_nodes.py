"""A local Ray cluster of several nodes on 127.0.0.1, in a process of its own, for tests and trials on one machine.

It starts a head and ``--nodes - 1`` more nodes with ``ray.cluster_utils.Cluster`` (one machine cannot add a second
node with `ray start --address 127.0.0.1:PORT`: Ray then rewrites 127.0.0.1 into the machine's network address, and
with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps it on loopback, `ray start` refuses a second node), prints one
JSON line ``{"address": "127.0.0.1:PORT", "node_ids": [...], "temp_dir": ...}`` on stdout, and holds the cluster
until its stdin closes or it gets SIGTERM/SIGINT; then it shuts every node down. A driver connects with
``lab sweep --executor ray --ray-address ADDRESS``.

Token authentication: on when a token is found as `ray start` finds it (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``) and ``RAY_AUTH_MODE`` is unset; ``RAY_AUTH_MODE`` set by the caller is
kept.

    python benchmarks/ray_two_nodes.py [--nodes 2] [--num-cpus 1]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

# keep every node and this process on 127.0.0.1 (read when ray is imported: ray._private.ray_constants)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _token_available() -> bool:
    """Whether a Ray auth token is set or stored where Ray looks for one."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or Path(path or Path.home() / ".ray" / "auth_token").is_file()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2, help="nodes, the head included (default 2)")
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs each node offers (default 1)")
    args = p.parse_args(argv)
    if args.nodes < 1 or args.num_cpus < 1:
        p.error("--nodes and --num-cpus take a whole number of at least 1")
    return args


def _wait_for_stop() -> None:
    """Block until stdin closes, SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stop.wait()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if "RAY_AUTH_MODE" not in os.environ and _token_available():
        os.environ["RAY_AUTH_MODE"] = "token"
    from ray.cluster_utils import Cluster  # optional extra: imported once the environment above is set

    temp = tempfile.mkdtemp(prefix="lab-ray-")  # short: Ray's socket paths live under it
    node = {"num_cpus": args.num_cpus, "node_ip_address": "127.0.0.1", "temp_dir": temp}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        for _ in range(args.nodes - 1):
            cluster.add_node(**node)
        cluster.wait_for_nodes(timeout=300)
        print(json.dumps({"address": cluster.address, "temp_dir": temp,
                          "node_ids": [n.node_id for n in cluster.list_all_nodes()]}), flush=True)
        _wait_for_stop()
    finally:
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
