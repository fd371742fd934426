"""lab.cli.server (`lab server`): its defaults and bad arguments as one line (the real PostgreSQL + MLflow server
it starts: tests/tracking/test_server.py)."""
from __future__ import annotations

import pytest

from lab.cli.main import build_parser, main


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
