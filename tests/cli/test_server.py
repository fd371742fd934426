"""lab.cli.server (`lab server`): what it passes to lab.tracking.server.start_server, what it prints, and bad
arguments as one line (the real PostgreSQL + MLflow server: tests/tracking/test_server.py)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

import lab.tracking.server
from lab.cli.main import build_parser, main


def test_the_options_reach_start_server_and_the_urls_are_printed(tmp_path, monkeypatch, capsys):
    calls = []

    @contextmanager
    def fake_start_server(folder, **kwargs):  # the server process has already exited: the command returns
        calls.append((folder, kwargs))
        yield SimpleNamespace(url="http://10.0.0.5:5001", db_port=5433, folder=Path(folder),
                              mlflow=SimpleNamespace(poll=lambda: 0))

    monkeypatch.setattr(lab.tracking.server, "start_server", fake_start_server)
    argv = ["server", "--folder", str(tmp_path / "srv"), "--host", "0.0.0.0", "--port", "5001", "--db-port", "5433",
            "--workers", "3", "--allowed-hosts", "lab-box:5001"]
    assert main(argv) == 0
    assert calls == [(str(tmp_path / "srv"), {"host": "0.0.0.0", "port": 5001, "db_port": 5433, "workers": 3,
                                              "allowed_hosts": "lab-box:5001"})]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"MLflow server: http://10.0.0.5:5001 (runs in PostgreSQL on 127.0.0.1:5433, artifacts under "
                      f"{tmp_path / 'srv' / 'artifacts'}); Ctrl-C stops both")
    assert out[1].startswith("sweep into it: lab sweep SPEC --tracking-root http://10.0.0.5:5001")
    assert out[-1] == "stopping the MLflow server and PostgreSQL"


def test_defaults_are_a_local_server_in_mlflow_server():
    args = build_parser().parse_args(["server"])
    assert (args.folder, args.host, args.port, args.db_port, args.workers, args.allowed_hosts) == (
        "mlflow-server", "127.0.0.1", 5000, 5432, 2, None)


@pytest.mark.parametrize("option", ["--port", "--db-port", "--workers"])
def test_counts_below_1_are_one_line_exit_2(option, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["server", option, "0"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and f"argument {option}: expected an integer >= 1" in err
