"""One MLflow server for a team: PostgreSQL holds the runs, ``mlflow server --serve-artifacts`` serves them and the
artifacts over HTTP (`lab server`; every command then takes ``--tracking-root http://host:port``).

Layout of the server's folder
- ``pgdata/``: the PostgreSQL cluster (``initdb`` on first start, trust authentication for the ``postgres`` role,
  listening on TCP at ``127.0.0.1:db_port`` only, no Unix socket: only the MLflow server beside it connects);
  database ``mlflow``. PostgreSQL refuses to run as
  root: when this process is root, the database runs as the ``postgres`` user (``runuser -u postgres``), so that
  user must be able to reach the folder.
- ``artifacts/``: where the server stores the artifacts clients send it (``--artifacts-destination``); clients
  never write there themselves (``mlflow-artifacts:/`` URIs, proxied by the server).
- ``mlflow-server.log``: the server's output.

The binaries are found on PATH, else under ``/usr/lib/postgresql/<version>/bin`` (Debian's ``postgresql``).
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from lab.core.errors import ConfigError, TrackingError

#: Database that holds the runs.
DATABASE = "mlflow"
#: PostgreSQL role (trust authentication: reachable on 127.0.0.1 only).
ROLE = "postgres"
#: Seconds a server worker may take to answer uvicorn's health check before it is restarted (uvicorn's default,
#: 5 s, restarts workers of a loaded machine in the middle of requests).
HEALTHCHECK_TIMEOUT = 120


@dataclass
class TeamServer:
    """A running PostgreSQL + MLflow server pair (from :func:`start_server`); :meth:`stop` ends both."""

    folder: Path
    host: str
    port: int
    db_port: int
    mlflow: subprocess.Popen
    run_as: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def backend_uri(self) -> str:
        return postgres_uri("127.0.0.1", self.db_port)

    def stop(self) -> None:
        if self.mlflow.poll() is None:
            try:
                os.killpg(self.mlflow.pid, signal.SIGTERM)
                self.mlflow.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.mlflow.pid, signal.SIGKILL)
        stop_postgres(self.folder / "pgdata", self.run_as)

    def down(self) -> str | None:
        """Why one of the pair no longer serves (the MLflow server exited, PostgreSQL does not accept connections
        on its port), or None while both run."""
        code = self.mlflow.poll()
        if code is not None:
            return f"the MLflow server exited (code {code}; its log: {self.folder / 'mlflow-server.log'})"
        with socket.socket() as s:
            s.settimeout(5)
            if s.connect_ex(("127.0.0.1", self.db_port)) != 0:
                return (f"PostgreSQL stopped accepting connections on 127.0.0.1:{self.db_port} (its log: "
                        f"{self.folder / 'pgdata' / 'postgres.log'})")
        return None

    def __enter__(self) -> "TeamServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def postgres_uri(host: str, port: int, database: str = DATABASE) -> str:
    return f"postgresql+psycopg2://{ROLE}@{host}:{port}/{database}"


def postgres_bin(name: str) -> str:
    """Path of PostgreSQL program ``name`` (initdb, pg_ctl, createdb): on PATH, else the newest Debian install."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if
                      p.parent.name.isdigit() else 0)
    for folder in reversed(versions):
        if (folder / name).is_file():
            return str(folder / name)
    raise ConfigError(f"PostgreSQL's {name} not found (on PATH or /usr/lib/postgresql/*/bin): install PostgreSQL, "
                      "e.g. apt-get install postgresql")


def run_as_database_user() -> list[str]:
    """The command prefix that runs a PostgreSQL program: ``runuser -u postgres --`` as root, else nothing."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(ROLE)
    except KeyError:
        raise ConfigError("running as root, PostgreSQL needs a non-root user: no 'postgres' user here "
                          "(apt-get install postgresql creates it)") from None
    return ["runuser", "-u", ROLE, "--"]


def _run(cmd: list[str], what: str, timeout: float = 180) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise TrackingError(f"{what} failed ({' '.join(cmd[:4])} ...): {(proc.stderr or proc.stdout).strip()[-500:]}")
    return proc


def start_postgres(pgdata: Path, host: str = "127.0.0.1", port: int = 5432, timeout: float = 180) -> str:
    """Start PostgreSQL on ``pgdata`` (created with initdb when empty) at ``host:port`` and make sure database
    :data:`DATABASE` exists; returns its SQLAlchemy URI (``postgresql+psycopg2://postgres@host:port/mlflow``:
    psycopg2, the driver of the postgres extra)."""
    prefix = run_as_database_user()
    pgdata = Path(pgdata)
    if not (pgdata / "PG_VERSION").is_file():
        pgdata.mkdir(parents=True, exist_ok=True)
        if prefix:
            shutil.chown(pgdata, ROLE, ROLE)
            if subprocess.run([*prefix, "test", "-w", str(pgdata)]).returncode != 0:
                raise ConfigError(f"{pgdata}: the postgres user cannot reach this folder (a parent folder is "
                                  "private to root?); choose a folder it can reach")
        pgdata.chmod(0o700)
        _run([*prefix, postgres_bin("initdb"), "-D", str(pgdata), "-U", ROLE, "--auth=trust", "-E", "UTF8"],
             "initdb", timeout)
    options = f"-p {port} -c listen_addresses={host} -c unix_socket_directories=''"
    _run([*prefix, postgres_bin("pg_ctl"), "-D", str(pgdata), "-l", str(pgdata / "postgres.log"), "-o", options,
          "-w", "-t", str(int(timeout)), "start"], f"PostgreSQL start on {host}:{port}", timeout + 10)
    proc = subprocess.run([postgres_bin("createdb"), "-h", host, "-p", str(port), "-U", ROLE, DATABASE],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 and "already exists" not in proc.stderr:
        stop_postgres(pgdata, prefix)
        raise TrackingError(f"createdb {DATABASE} on {host}:{port} failed: {proc.stderr.strip()}")
    return postgres_uri(host, port)


def stop_postgres(pgdata: Path, prefix: list[str] | None = None) -> None:
    """Stop the PostgreSQL running on ``pgdata`` (fast shutdown); nothing when none runs there."""
    if (Path(pgdata) / "postmaster.pid").exists():
        subprocess.run([*(run_as_database_user() if prefix is None else prefix), postgres_bin("pg_ctl"), "-D",
                        str(pgdata), "-m", "fast", "-w", "stop"], capture_output=True, timeout=120)


def start_mlflow_server(backend_uri: str, artifacts: Path, host: str = "127.0.0.1", port: int = 5000,
                        workers: int = 2, log: Path | None = None, timeout: float = 300,
                        allowed_hosts: str | None = None) -> subprocess.Popen:
    """``mlflow server`` on ``backend_uri`` with proxied artifacts stored under ``artifacts``, in its own process
    group; returns once ``/health`` answers (TrackingError with the log's tail when it exits or times out)."""
    Path(artifacts).mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri, "--serve-artifacts",
           "--artifacts-destination", str(Path(artifacts).resolve()), "--host", host, "--port", str(port),
           "--workers", str(workers)]
    if workers > 1:  # uvicorn restarts a worker that misses its 5 s health check: a busy machine loses requests
        cmd += ["--uvicorn-opts", f"--timeout-worker-healthcheck {HEALTHCHECK_TIMEOUT}"]
    if allowed_hosts:
        cmd += ["--allowed-hosts", allowed_hosts]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url, deadline = f"http://{host}:{port}/health", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = Path(log).read_text(errors="replace")[-1500:] if log else ""
            raise TrackingError(f"mlflow server on {host}:{port} exited ({proc.returncode}): {tail}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise TrackingError(f"mlflow server on {host}:{port} did not answer {url} within {timeout:.0f} s"
                        + (f" (log: {log})" if log else ""))


def start_server(folder: str | Path, host: str = "127.0.0.1", port: int = 5000, db_port: int = 5432,
                 workers: int = 2, timeout: float = 300, allowed_hosts: str | None = None) -> TeamServer:
    """PostgreSQL (on 127.0.0.1:``db_port``) + MLflow server (on ``host:port``) in ``folder`` (see the module
    docstring). ``allowed_hosts``: the Host headers the server accepts besides localhost (its
    ``--allowed-hosts``), needed when teammates reach it by a name or address. Use as a context manager or call
    :meth:`TeamServer.stop`."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    backend = start_postgres(folder / "pgdata", "127.0.0.1", db_port, timeout=min(timeout, 180))
    try:
        proc = start_mlflow_server(backend, folder / "artifacts", host, port, workers, folder / "mlflow-server.log",
                                   timeout, allowed_hosts)
    except BaseException:
        stop_postgres(folder / "pgdata")
        raise
    return TeamServer(folder, host, port, db_port, proc, run_as_database_user())
