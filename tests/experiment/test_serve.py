"""lab.experiment.serve: a real BM25 index served over HTTP on 127.0.0.1 (POST and GET /retrieve, /health, the
bearer token, document texts), the server thread's start-up error, and main's refusals (the ``http`` strategy
against it: tests/retrievers/test_http.py; non-loopback hosts: tests/cli/test_exposure.py)."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request

import pytest

from lab.core.errors import LabError
from lab.data.types import Corpus, Document
from lab.experiment.serve import StrategyServer, main, make_app
from lab.retrievers.base import Context, build

CORPUS = Corpus({"d1": Document("d1", "global routing assigns nets to gcells"),
                 "d2": Document("d2", "detailed routing draws the wires"),
                 "d3": Document("d3", "placement puts cells on rows")})


@pytest.fixture(scope="module")
def bm25():
    retriever = build("bm25", {}, Context(progress=False))
    retriever.index(CORPUS)
    return retriever


def _get(url: str, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read())


def test_post_and_get_answer_the_retrievers_hits_with_exact_scores(bm25):
    expected = [{"id": d, "score": float(s)} for d, s in bm25.search_one("routing wires", 2)]
    with StrategyServer(make_app(bm25)) as server:
        assert server.port > 0 and server.url("/x") == f"http://127.0.0.1:{server.port}/x"
        assert _post(server.url(), {"query": "routing wires", "k": 2}) == (200, {"hits": expected})
        query = urllib.parse.urlencode({"query": "routing wires", "k": 2})
        assert _get(server.url() + "?" + query) == (200, {"hits": expected})
        assert _get(server.url("/health")) == (200, {"ok": True})
    assert expected[0]["id"] == "d2"


def test_a_token_is_required_when_given_and_texts_are_added_on_request(bm25):
    with StrategyServer(make_app(bm25, token="s3cret", with_text=True, corpus=CORPUS)) as server:
        url = server.url() + "?query=placement&k=1"
        assert _get(url) == (401, {"error": "unauthorized"})
        assert _get(url, {"Authorization": "Bearer wrong"})[0] == 401
        status, body = _get(url, {"Authorization": "Bearer s3cret"})
    assert status == 200 and body["hits"][0]["id"] == "d3"
    assert body["hits"][0]["text"] == "placement puts cells on rows"


def test_a_server_that_cannot_bind_says_so(bm25):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(LabError, match=f"server on 127.0.0.1:{s.getsockname()[1]} did not start"):
            StrategyServer(make_app(bm25), port=s.getsockname()[1]).start()


def test_main_refuses_a_token_variable_that_is_not_set(monkeypatch, capsys):
    monkeypatch.delenv("RAGLAB_TEST_NO_SUCH_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["--dataset", "data/ord-qa", "--token-env", "RAGLAB_TEST_NO_SUCH_TOKEN"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == ("error: --token-env RAGLAB_TEST_NO_SUCH_TOKEN: that environment variable is "
                                       "not set or empty\n")
