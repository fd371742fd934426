"""Shared test fixtures."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The ORD-QA dataset of the repository (data/ord-qa), as the CLI tests pass it to `--dataset`.
ORDQA = str(REPO / "data" / "ord-qa")


@pytest.fixture
def blank_tracking_root(tmp_path, pytestconfig) -> Path:
    """A fresh tracking root: a copy of an empty MLflow DB made once per MLflow version (creating one runs the
    migrations, ~15 s here), cached under pytest's cache folder."""
    return blank_store(tmp_path, pytestconfig)


def blank_store(folder: Path, pytestconfig) -> Path:
    import mlflow

    from lab.tracking.store import client

    cache = pytestconfig.cache.mkdir(f"blank-mlflow-{mlflow.__version__}")
    if not (cache / "mlflow.db").exists():
        tmp = cache / "making"
        shutil.rmtree(tmp, ignore_errors=True)
        client(tmp).search_experiments()
        (tmp / "mlflow.db").replace(cache / "mlflow.db")
    root = folder / "mlruns"
    root.mkdir(parents=True)
    shutil.copy(cache / "mlflow.db", root / "mlflow.db")
    return root


class Always500:
    """An OpenAI-compatible endpoint on 127.0.0.1 that answers every request with HTTP 500, counting them."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests += 1
                body = b"internal error: model crashed"
                self.send_response(500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def minilm(tmp_path_factory):
    """The packaged all-MiniLM-L6-v2 embedder (``load_embedder("minilm")``), loaded once for the whole session: an
    Embedder holds no state that encoding changes, so tests may share it (caches of what it encodes live in each
    test's own Context or EmbeddingCache)."""
    from lab.models.embedders import load_embedder

    return load_embedder("minilm", cache_dir=tmp_path_factory.mktemp("minilm"), progress=False)


@pytest.fixture
def always_500():
    """An OpenAI-compatible endpoint on 127.0.0.1 that always answers HTTP 500 (``.url``, ``.requests``)."""
    server = Always500()
    yield server
    server.close()
