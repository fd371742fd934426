"""`lab sweep` on a spec from someone else (a pull request a CI job sweeps): a spec that names an environment
variable the person running it did not allow, or a YAML alias bomb, is refused with one line before any work."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lab.cli.main import main

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "tests" / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
SPEC = (f"notebook: {NOTEBOOK}\ndataset: data/ord-qa\nexperiment: from-a-pr\n"
        "fixed: {{strategy: bm25, k: 10, max_queries: 3}}\ngrid:\n  params.k1: [0.9]\n{extra}")


@pytest.fixture
def gateway():
    """A real HTTP endpoint on 127.0.0.1 that records every request's headers."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802 - http.server API
            seen.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()

        do_POST = do_PUT  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()


def test_a_spec_naming_a_variable_not_allowed_is_refused_before_any_work(gateway, tmp_path, monkeypatch, capsys):
    url, seen = gateway
    monkeypatch.setenv("CI_SECRET_TOKEN", "s3cr3t-value-of-the-ci")
    spec = tmp_path / "pr.yaml"
    spec.write_text(SPEC.format(extra=f"publish:\n  pushgateway: {url}\n"
                                      "  headers_env: {X-Leak: 'Bearer $CI_SECRET_TOKEN'}\n"))
    root = tmp_path / "mlruns"
    code = main(["sweep", str(spec), "--tracking-root", str(root), "--output-dir", str(tmp_path / "out"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert f"{spec}, line 9, publish.headers_env" in err and "CI_SECRET_TOKEN" in err and "--allow-env" in err
    assert "s3cr3t" not in err and seen == [] and not root.exists() and not (tmp_path / "out").exists()


def test_raglab_variables_and_allowed_ones_pass(tmp_path, monkeypatch, capsys):
    spec = tmp_path / "ok.yaml"
    spec.write_text(SPEC.format(extra="publish:\n  pushgateway: http://127.0.0.1:9\n"
                                      "  headers_env: {A: RAGLAB_PGW_TOKEN, B: 'Bearer ${CI_TOKEN}'}\n"))
    args = ["sweep", str(spec), "--tracking-root", str(tmp_path / "mlruns"), "--dry-run"]
    assert main(args) == 2 and "CI_TOKEN" in capsys.readouterr().err
    assert main([*args, "--allow-env", "CI_TOKEN"]) == 0, capsys.readouterr().err


def test_a_yaml_alias_bomb_is_one_line(tmp_path, capsys):
    lists = ['&a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]'] + [  # the last one holds 9^5 values
        f"&{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcd", "bcde", strict=True)]
    spec = tmp_path / "bomb.yaml"
    spec.write_text(SPEC.format(extra=f"  params.b: [{', '.join(lists)}]\n"))
    code = main(["sweep", str(spec), "--tracking-root", str(tmp_path / "mlruns"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{spec}:" in err and "alias bomb" in err, err[-2000:]
