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

    python scripts/ray_two_nodes.py [--nodes 2] [--num-cpus 1]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path

import psutil

# keep every node and this process on 127.0.0.1 (read when ray is imported: ray._private.ray_constants)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


#: Starts tried before giving up (see :func:`_start`).
START_ATTEMPTS = 3


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


def _stop(signum: int, _frame) -> None:
    """SIGTERM or SIGINT, even while the nodes start: leave through ``main``'s ``finally``, which shuts them down."""
    raise SystemExit(128 + signum)


def _wait_for_stop() -> None:
    """Block until stdin closes (or a signal arrives, see :func:`_stop`)."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while not stop.wait(1.0):  # a timed wait, so a signal's handler runs in this (the main) thread
        pass


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    if "RAY_AUTH_MODE" not in os.environ and _token_available():
        os.environ["RAY_AUTH_MODE"] = "token"
    from ray.cluster_utils import Cluster  # optional extra: imported once the environment above is set

    cluster, temp = _start(args.nodes, args.num_cpus, Cluster)
    try:
        print(json.dumps({"address": cluster.address, "temp_dir": temp,
                          "node_ids": [n.node_id for n in cluster.list_all_nodes()]}), flush=True)
        _wait_for_stop()
    finally:
        _stop_all(cluster, temp)
    return 0


def _stop_all(cluster, temp: str) -> None:
    """Shut the cluster's nodes down, end what a node that failed half-way left (this process's children under
    ``temp``: the cluster does not know a node whose start raised), and remove ``temp``."""
    cluster.shutdown()
    for child in psutil.Process().children(recursive=True):
        try:
            if any(temp in part for part in child.cmdline()):
                child.kill()
        except psutil.Error:
            pass
    shutil.rmtree(temp, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ports(head: bool = False) -> dict[str, int]:
    """Fixed free ports for a node's servers and agents. With port 0 (Ray's default) each process picks its own and
    writes it to a file that the raylet (or, for the GCS, the node) waits for within a fixed time before it
    registers; on a loaded machine the agents' Python start overruns that wait and the node never comes up."""
    names = ["node_manager_port", "object_manager_port", "metrics_agent_port", "metrics_export_port",
             "dashboard_agent_listen_port", "runtime_env_agent_port"] + (["gcs_server_port"] if head else [])
    return {name: _free_port() for name in names}


def _start(nodes: int, num_cpus: int, cluster_cls, attempts: int = START_ATTEMPTS):
    """The cluster and its temp dir, its nodes up. Ray gives a starting node a fixed 30 s to register with the GCS
    (ray._private.node.Node), which a loaded machine can overrun: a start that fails is shut down and tried again,
    ``attempts`` times in all."""
    for attempt in range(1, attempts + 1):
        temp = tempfile.mkdtemp(prefix="lab-ray-")  # short: Ray's socket paths live under it
        node = {"num_cpus": num_cpus, "node_ip_address": "127.0.0.1", "temp_dir": temp}
        cluster = cluster_cls(initialize_head=False)
        try:
            cluster.add_node(**node, **_ports(head=True), include_dashboard=False)  # the head
            for _ in range(nodes - 1):
                cluster.add_node(**node, **_ports())
            cluster.wait_for_nodes(timeout=300)
            return cluster, temp
        except BaseException as e:  # Ray raises a bare Exception when a node does not register in time
            _stop_all(cluster, temp)
            if not isinstance(e, Exception) or attempt == attempts:  # a signal, or the last try
                raise
            print(f"ray_two_nodes: start {attempt} of {attempts} failed ({e}); load {os.getloadavg()[0]:.1f}; "
                  "trying again", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")

if __name__ == "__main__":
    sys.exit(main())
