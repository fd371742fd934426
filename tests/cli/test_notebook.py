"""lab.cli.notebook (`lab notebook`): the JupyterLab command it would run (--print), the token, and bad ports as
one `error:` line (JupyterLab started for real: tests/workbench/test_notebook_server.py, cli/test_exposure.py)."""
from __future__ import annotations

import shlex

import pytest

from lab.cli.main import main
from lab.core.paths import repo_root


def test_print_gives_the_token_by_environment_and_the_command_on_the_notebooks(capsys, monkeypatch):
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)
    assert main(["notebook", "--print", "--token", "tok 1", "--port", "8899"]) == 0
    env, *argv = shlex.split(capsys.readouterr().out)
    assert env == "JUPYTER_TOKEN=tok 1"
    assert "--ServerApp.ip=127.0.0.1" in argv and "--ServerApp.port=8899" in argv
    assert f"--ServerApp.root_dir={repo_root() / 'notebooks'}" in argv
    assert not any("tok 1" in a for a in argv)  # the token never on the command line


def test_the_token_comes_from_jupyter_token_else_is_random(capsys, monkeypatch):
    monkeypatch.setenv("JUPYTER_TOKEN", "from-env")
    assert main(["notebook", "--print"]) == 0
    assert capsys.readouterr().out.startswith("JUPYTER_TOKEN=from-env ")
    monkeypatch.delenv("JUPYTER_TOKEN")
    tokens = set()
    for _ in range(2):
        assert main(["notebook", "--print"]) == 0
        tokens.add(capsys.readouterr().out.split(" ", 1)[0].removeprefix("JUPYTER_TOKEN="))
    assert len(tokens) == 2 and all(len(t) == 48 for t in tokens)  # secrets.token_hex(24)


@pytest.mark.parametrize("port", ["0", "65536"])
def test_a_port_out_of_range_is_one_line_exit_2(port, capsys):
    assert main(["notebook", "--print", "--port", port]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --port {port}: give a TCP port between 1 and 65535\n"
