"""`lab server`: PostgreSQL + an MLflow server with proxied artifacts in one folder, for a team to share
(lab.tracking.server); runs in the foreground until Ctrl-C, SIGTERM or SIGHUP, then stops both. When one of the
two stops on its own, the other is stopped too and the command says which one, exit 1."""
from __future__ import annotations

import signal
import sys
import time

from lab.cli.options import positive_int
from lab.tracking.server import start_server

#: Signals that stop the pair cleanly (Ctrl-C, a service manager's stop, a closed terminal).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds between two checks that both servers still run.
CHECK_EVERY_S = 2.0


class Stop(BaseException):
    """A stop signal arrived."""


def _raise_stop(signum, _frame) -> None:
    raise Stop(signal.Signals(signum).name)


def cmd_server(args) -> int:
    previous = {sig: signal.signal(sig, _raise_stop) for sig in STOP_SIGNALS}
    try:
        return _serve(args)
    except Stop as stop:  # arrived while starting or stopping: start_server stops what it started
        print(f"{stop}: stopped", flush=True)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve(args) -> int:
    with start_server(args.folder, host=args.host, port=args.port, db_port=args.db_port, workers=args.workers,
                      allowed_hosts=args.allowed_hosts) as server:
        try:
            print(f"MLflow server: {server.url} (runs in PostgreSQL on 127.0.0.1:{server.db_port}, artifacts under "
                  f"{server.folder / 'artifacts'}); Ctrl-C stops both", flush=True)
            print(f"sweep into it: lab sweep SPEC --tracking-root {server.url}   (or export MLFLOW_TRACKING_URI="
                  f"{server.url})", flush=True)
            while (problem := server.down()) is None:
                time.sleep(CHECK_EVERY_S)
        except Stop as stop:
            print(f"{stop}: stopping the MLflow server and PostgreSQL", flush=True)
            for sig in STOP_SIGNALS:  # a second signal must not cut the stop short
                signal.signal(sig, signal.SIG_IGN)
            return 0
        print(f"error: {problem}; stopping the other one too. Start `lab server` again once the cause is fixed",
              file=sys.stderr, flush=True)
        return 1


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
