"""`lab server`: PostgreSQL + an MLflow server with proxied artifacts in one folder, for a team to share
(lab.tracking.server); runs in the foreground until Ctrl-C, then stops both."""
from __future__ import annotations

import time

from lab.cli.options import positive_int
from lab.tracking.server import start_server


def cmd_server(args) -> int:
    with start_server(args.folder, host=args.host, port=args.port, db_port=args.db_port, workers=args.workers,
                      allowed_hosts=args.allowed_hosts) as server:
        print(f"MLflow server: {server.url} (runs in PostgreSQL on 127.0.0.1:{server.db_port}, artifacts under "
              f"{server.folder / 'artifacts'}); Ctrl-C stops both", flush=True)
        print(f"sweep into it: lab sweep SPEC --tracking-root {server.url}   (or export MLFLOW_TRACKING_URI="
              f"{server.url})", flush=True)
        try:
            while server.mlflow.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        print("stopping the MLflow server and PostgreSQL", flush=True)
    return 0


def add_parsers(sub) -> None:
    s = sub.add_parser("server", help="start a shared MLflow server (PostgreSQL + proxied artifacts) in a folder")
    s.add_argument("--folder", default="mlflow-server", help="where the database and artifacts live "
                   "(default ./mlflow-server; reused on the next start)")
    s.add_argument("--host", default="127.0.0.1", help="address the MLflow server listens on (0.0.0.0: every "
                   "interface, for teammates; the database always listens on 127.0.0.1)")
    s.add_argument("--port", type=positive_int, default=5000)
    s.add_argument("--db-port", type=positive_int, default=5432, help="PostgreSQL's port on 127.0.0.1")
    s.add_argument("--workers", type=positive_int, default=2, help="server worker processes")
    s.add_argument("--allowed-hosts", help="Host headers the server accepts besides localhost, comma separated "
                   "(the name or address teammates use, e.g. lab-box:5000,10.0.0.5:5000)")
    s.set_defaults(func=cmd_server)
