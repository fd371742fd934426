"""lab.retrievers.http: the ``http`` strategy against real aiohttp servers on 127.0.0.1.

One server serves our own BM25 over ORD-QA (290 chunks, 90 queries), so the ``http`` strategy must reproduce
``lab run --strategy bm25`` exactly. A second app serves faults by route (``/<scenario>/retrieve``), answering
with the same BM25 hits when it does answer, and records every attempt (query id, time, Authorization header).
"""
from __future__ import annotations

import asyncio
import collections
import json
import threading
import time

import pytest

from lab.core.errors import ConfigError
from lab.core.net import public_url
from lab.data.types import Corpus, Document
from lab.experiment.serve import StrategyServer, make_app
from lab.retrievers.base import Context, build
from lab.retrievers.http import HttpRetrieverError, ResponseError, fill_template, parse_hits

SECRET = "tok-SECRET-6c1f0e9a7b"
FAST = {"backoff": 0.01, "max_backoff": 0.05}


def ctx():
    return Context(progress=False)


@pytest.fixture(scope="module")
def ordqa():
    from lab.core.paths import resolve_repo_path
    from lab.experiment.run import load

    return load(resolve_repo_path("data/ord-qa"), progress=False)


@pytest.fixture(scope="module")
def bm25(ordqa):
    r = build("bm25", {}, ctx())
    r.index(ordqa.corpus)
    return r


@pytest.fixture(scope="module")
def bm25_server(bm25):
    with StrategyServer(make_app(bm25)) as server:
        yield server


class Faults:
    """Routes by scenario; ``attempts[(scenario, qid)]`` lists (time, Authorization header) of each request."""

    FAIL_ALWAYS = {"10", "13"}  # among the first six ids in string order (1, 10, ..., 14)

    def __init__(self, bm25, corpus):
        self.bm25, self.corpus = bm25, corpus
        self.attempts: dict = collections.defaultdict(list)
        self.lock = threading.Lock()

    def app(self):
        from aiohttp import web

        app = web.Application()
        app.router.add_route("*", "/{scenario}/retrieve", self.handle)
        return app

    def hits(self, text, k):
        return [{"id": d, "score": float(s)} for d, s in self.bm25.search_one(text, k)]

    async def handle(self, request):
        from aiohttp import web

        scenario = request.match_info["scenario"]
        if request.method == "GET":
            data = {"query": request.query["query"], "k": int(request.query["k"]),
                    "query_id": request.query.get("qid", "")}
        else:
            data = await request.json()
        qid = str(data.get("query_id", ""))
        with self.lock:
            self.attempts[(scenario, qid)].append((time.monotonic(), request.headers.get("Authorization")))
            n = len(self.attempts[(scenario, qid)])
        hits = self.hits(data["query"], int(data["k"]))
        if scenario == "slow" and n == 1:
            await asyncio.sleep(3.0)
        if scenario == "flaky" and n == 1:
            return web.Response(status=503, text="warming up")
        if scenario == "fail" and qid in self.FAIL_ALWAYS:
            return web.Response(status=500, text="internal error")
        if scenario == "down":
            return web.Response(status=502, text="bad gateway")
        if scenario == "busy" and n == 1:
            return web.Response(status=429, text="slow down", headers={"Retry-After": "1"})
        if scenario == "malformed" and qid in self.FAIL_ALWAYS:
            return web.Response(status=200, text='{"hits": [{"id": "install_0", "score": 1.0}',
                                content_type="application/json")
        if scenario == "badshape" and qid in self.FAIL_ALWAYS:
            return web.json_response({"answer": "OpenROAD is ...", "sources": 3})
        if scenario == "auth":
            got = request.headers.get("Authorization")
            if got != f"Bearer {SECRET}":
                return web.Response(status=401, text=f"bad credentials: {got}")
        if scenario == "results":
            return web.json_response({"results": [{"doc_id": h["id"], "score": h["score"]} for h in hits]})
        if scenario == "bare":
            return web.json_response(hits)
        if scenario == "unknown":
            # a service that indexed its own chunks: ids the corpus does not know, text that is part of a document
            return web.json_response({"hits": [{"id": f"chunk-{h['id']}", "score": h["score"],
                                                "text": self.corpus[h["id"]].text[:400]} for h in hits]})
        return web.json_response({"hits": hits})


@pytest.fixture(scope="module")
def faults(bm25, ordqa):
    f = Faults(bm25, ordqa.corpus)
    with StrategyServer(f.app()) as server:
        f.url = lambda scenario: server.url(f"/{scenario}/retrieve")
        yield f


def few(ordqa, n=6):
    """The first n test queries by id (fault scenarios need only a few)."""
    queries, _ = ordqa.split("test")
    return queries.subset(sorted(queries)[:n])


def http(url, corpus=None, **params):
    r = build("http", {"url": url, **params}, ctx())
    if corpus is not None:
        r.index(corpus)
    return r


# ------------------------------------------------------------------------------------------------ pure parts
def test_fill_template_types_and_text():
    t = {"q": "{query}", "size": "{k}", "meta": {"id": "{query_id}", "note": "top {k} for {query_id}"}, "x": [1, "{k}"]}
    assert fill_template(t, "what is cts", 10, "q7") == {
        "q": "what is cts", "size": 10, "meta": {"id": "q7", "note": "top 10 for q7"}, "x": [1, 10]}
    assert fill_template('{"braces": "{query}"}', "a", 1, "b") == '{"braces": "a"}'  # other braces untouched


@pytest.mark.parametrize("payload, kw, want", [
    ({"hits": [{"id": "a", "score": 2}, {"id": "b", "score": 1.5}]}, {}, [("a", 2.0), ("b", 1.5)]),
    ({"results": [{"doc_id": "a", "score": "0.5"}]}, {}, [("a", 0.5)]),
    ([{"_id": "a", "_score": 3}], {}, [("a", 3.0)]),
    ({"hits": {"total": 2, "hits": [{"_id": 7, "_score": 1}]}}, {}, [("7", 1.0)]),  # Elasticsearch
    (["a", "b", "c"], {}, [("a", 3.0), ("b", 2.0), ("c", 1.0)]),  # bare ids: scored by rank
    ([["a", 0.9], ["b", 0.1]], {}, [("a", 0.9), ("b", 0.1)]),
    ({"data": {"matches": [{"metadata": {"doc": "a"}, "sim": 0.3}]}},
     {"hits_path": "$.data.matches", "id_field": "metadata.doc", "score_field": "sim"}, [("a", 0.3)]),
    ({"out": [{"items": [{"id": "a", "score": 5}, {"id": "b", "score": 9}]}]},
     {"hits_path": "out.0.items", "score_field": "rank"}, [("a", 2.0), ("b", 1.0)]),
])
def test_parse_hits_common_shapes(payload, kw, want):
    assert [(d, s) for d, s, _ in parse_hits(payload, **kw)] == want


@pytest.mark.parametrize("payload, kw, message", [
    ({"answer": "x"}, {}, "no list of hits"),
    ({"hits": [{"name": "a"}]}, {}, "no id field"),
    ({"hits": [{"id": "a", "score": "high"}]}, {}, "not a number"),
    ({"hits": [{"id": "a", "score": float("nan")}]}, {}, "not finite"),
    ({"hits": [{"id": "a", "score": 1}, {"id": "b"}]}, {}, "some hits have a score"),
    ({"data": {"x": []}}, {"hits_path": "data.results"}, "no 'data.results'"),
    ({"hits": 3}, {"hits_path": "hits"}, "not a list"),
])
def test_parse_hits_errors_name_the_problem(payload, kw, message):
    with pytest.raises(ResponseError, match=message):
        parse_hits(payload, **kw)


def test_url_checks():
    assert public_url("http://127.0.0.1:9/retrieve?index=docs") == "http://127.0.0.1:9/retrieve"
    with pytest.raises(ConfigError, match="credentials in the URL"):
        public_url("https://user:pw@example.com/search")
    with pytest.raises(ConfigError, match="'api_key' looks like a credential"):
        public_url("https://example.com/search?index=a&api_key=abc")
    with pytest.raises(ConfigError, match="needs the endpoint"):
        build("http", {}, ctx())
    with pytest.raises(ConfigError, match="concurrency"):
        build("http", {"url": "http://127.0.0.1:9/r", "concurrency": 0}, ctx())


# ------------------------------------------------------------------------------------------------ real servers
def test_http_reproduces_bm25_exactly_through_lab_run(bm25_server, capsys):
    """`lab run --strategy http` against our BM25 served over HTTP == `lab run --strategy bm25`, all 90 queries."""
    from lab.cli.main import main
    from lab.core.paths import resolve_repo_path

    ds = str(resolve_repo_path("data/ord-qa"))
    assert main(["run", "--dataset", ds, "--strategy", "bm25", "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert main(["run", "--dataset", ds, "--strategy", "http", "--set", f"url={bm25_server.url()}", "--json"]) == 0
    served = json.loads(capsys.readouterr().out)
    metrics = [k for k in direct if "@" in k]
    assert len(metrics) >= 30
    assert {m: served[m] for m in metrics} == {m: direct[m] for m in metrics}
    info = served["_meta"]["retriever"]
    assert info["http_queries"] == 90 and info["http_failed"] == 0 and info["http_error_rate"] == 0
    assert info["http_unknown_ids"] == 0 and info["http_final_status"] == {"200": 90}
    assert served["latency_p50_ms"] > 0 and served["latency_p95_ms"] >= served["latency_p50_ms"]


def test_http_run_equals_bm25_run_hit_for_hit(bm25_server, bm25, ordqa):
    queries, _ = ordqa.split("test")
    run = http(bm25_server.url(), ordqa.corpus, concurrency=4).search(queries, 20)
    want = {q: {d: float(s) for d, s in bm25.search_one(queries[q], 20)} for q in queries}
    assert run.scores == want and set(run.latency) == set(queries)


@pytest.mark.parametrize("scenario, params", [
    ("results", {}), ("bare", {}), ("get", {"method": "GET", "params": {"query": "{query}", "k": "{k}",
                                                                        "qid": "{query_id}"}}),
    ("custom", {"body": '{"query": "{query}", "k": "{k}", "query_id": "{query_id}", "filters": {}}',
                "hits_path": "hits", "id_field": "id", "score_field": "score"}),
])
def test_request_templates_and_response_shapes(faults, bm25, ordqa, scenario, params):
    q = few(ordqa, 3)
    run = http(faults.url(scenario), ordqa.corpus, **params).search(q, 10)
    assert run.scores == {x: {d: float(s) for d, s in bm25.search_one(q[x], 10)} for x in q}


def test_slow_answers_time_out_and_are_retried(faults, bm25, ordqa):
    q = few(ordqa, 4)
    r = http(faults.url("slow"), ordqa.corpus, timeout=0.5, **FAST)
    run = r.search(q, 10)
    d = r.diagnostics()
    assert d["http_failed"] == 0 and d["http_retries"] == 4 and d["http_attempts"] == 8
    assert all(len(faults.attempts[("slow", x)]) == 2 for x in q)
    assert run.scores == {x: {dd: float(s) for dd, s in bm25.search_one(q[x], 10)} for x in q}
    assert all(run.latency[x] < 0.5 for x in q)  # the latency is the answering request's, not the timed-out one


def test_5xx_then_ok_is_retried_and_always_5xx_is_recorded_failed(faults, ordqa):
    from lab.experiment.run import run_experiment

    r = http(faults.url("flaky"), ordqa.corpus, **FAST)
    r.search(few(ordqa), 10)
    assert r.diagnostics()["http_failed"] == 0 and r.diagnostics()["http_retries"] == 6

    res = run_experiment(ordqa, "http", {"url": faults.url("fail"), "retries": 2, **FAST}, ctx=ctx(), max_queries=6)
    info = res.info["retriever"]
    assert info["http_failed"] == 2 and info["http_error_rate"] == pytest.approx(2 / 6)
    assert set(info["http_failed_queries"].split(",")) == Faults.FAIL_ALWAYS
    assert info["http_first_error"].startswith("HTTP 500: internal error")
    assert info["http_final_status"] == {"200": 4, "500": 2}
    assert all(len(faults.attempts[("fail", x)]) == 3 for x in Faults.FAIL_ALWAYS)  # 1 + 2 retries
    # failed queries are scored (0 on every metric), never dropped
    pq = res.evaluation.per_query
    assert res.evaluation.n_queries == 6 and Faults.FAIL_ALWAYS <= set(pq.index)
    assert (pq.loc[sorted(Faults.FAIL_ALWAYS)] == 0).all().all()
    assert set(res.run.latency) == set(pq.index) - Faults.FAIL_ALWAYS
    failures = build("http", {"url": faults.url("fail"), "retries": 0}, ctx())
    failures.search(few(ordqa), 10)
    assert sorted(f["query_id"] for f in failures.failures()) == sorted(Faults.FAIL_ALWAYS)


def test_429_waits_for_retry_after(faults, ordqa):
    q = few(ordqa, 2)
    r = http(faults.url("busy"), ordqa.corpus, **FAST)
    r.search(q, 10)
    assert r.diagnostics()["http_failed"] == 0 and r.diagnostics()["http_retries"] == 2
    for x in q:
        (t1, _), (t2, _) = faults.attempts[("busy", x)]
        assert t2 - t1 >= 0.95  # Retry-After: 1 honoured although the backoff alone is 10-50 ms


@pytest.mark.parametrize("scenario, message", [("malformed", "not JSON"), ("badshape", "no list of hits")])
def test_malformed_answers_fail_those_queries_without_retry(faults, ordqa, scenario, message):
    r = http(faults.url(scenario), ordqa.corpus, **FAST)
    r.search(few(ordqa), 10)
    d = r.describe()
    assert d["http_failed"] == 2 and message in d["http_first_error"] and d["http_retries"] == 0


def test_every_query_failing_raises_with_the_first_error(faults, ordqa):
    with pytest.raises(HttpRetrieverError, match=r"6 of 6 queries failed.*HTTP 502: bad gateway"):
        http(faults.url("down"), ordqa.corpus, retries=1, **FAST).search(few(ordqa), 10)
    with pytest.raises(HttpRetrieverError, match="max_error_rate 0.1"):
        http(faults.url("fail"), ordqa.corpus, retries=0, max_error_rate=0.1).search(few(ordqa), 10)


def test_unknown_ids_are_counted_and_can_be_mapped_by_text(faults, bm25, ordqa):
    q = few(ordqa, 3)
    want = {x: {d: float(s) for d, s in bm25.search_one(q[x], 10)} for x in q}
    plain = http(faults.url("unknown"), ordqa.corpus)
    run = plain.search(q, 10)
    d = plain.describe()
    n_hits = sum(len(v) for v in want.values())
    assert d["http_unknown_ids"] == n_hits and d["http_mapped_by_text"] == 0
    assert d["http_unknown_examples"].startswith("chunk-") and len(d["http_unknown_examples"].split(",")) == 5
    assert all(all(doc.startswith("chunk-") for doc in run[x]) for x in q)  # kept: they score as not relevant

    mapped = http(faults.url("unknown"), ordqa.corpus, map_unknown="text")
    run = mapped.search(q, 10)
    assert mapped.diagnostics()["http_mapped_by_text"] == n_hits
    assert run.scores == want  # every chunk text is found in exactly one document


def test_token_from_environment_is_sent_and_never_logged(faults, ordqa, monkeypatch, tmp_path, blank_tracking_root):
    from lab.experiment.run import run_experiment
    from lab.tracking.results import log_result
    from lab.tracking.store import RESULT_ARTIFACT, artifact_file, client

    monkeypatch.delenv("RAGLAB_TEST_TOKEN", raising=False)
    params = {"url": faults.url("auth"), "headers_env": {"Authorization": "Bearer $RAGLAB_TEST_TOKEN"}, **FAST}
    with pytest.raises(ConfigError, match="RAGLAB_TEST_TOKEN is not set"):
        run_experiment(ordqa, "http", params, ctx=ctx(), max_queries=3)

    monkeypatch.setenv("RAGLAB_TEST_TOKEN", SECRET)
    res = run_experiment(ordqa, "http", params, ctx=ctx(), max_queries=3)
    assert res.info["retriever"]["http_failed"] == 0
    assert {h for x in res.run for _, h in faults.attempts[("auth", x)]} == {f"Bearer {SECRET}"}
    run_id = log_result(res, experiment="http-auth", tracking_root=blank_tracking_root, n_resamples=50)
    data = client(blank_tracking_root).get_run(run_id).data
    logged = json.dumps([data.params, data.tags]) + artifact_file(run_id, RESULT_ARTIFACT, tmp_path,
                                                                  blank_tracking_root).read_text()
    assert "RAGLAB_TEST_TOKEN" in logged and data.params["retriever.header_names"] == "Authorization"
    assert SECRET not in logged and SECRET not in json.dumps(res.info, default=str)

    # a wrong token: the server echoes it in its 401 body; the error text is redacted
    wrong = "tok-WRONG-0123456789"
    monkeypatch.setenv("RAGLAB_TEST_TOKEN", wrong)
    with pytest.raises(HttpRetrieverError, match="HTTP 401") as err:
        run_experiment(ordqa, "http", params, ctx=ctx(), max_queries=3)
    assert wrong not in str(err.value) and "***" in str(err.value)


def test_inside_a_running_event_loop(bm25_server, ordqa):
    """Jupyter (and Papermill) cells run inside an event loop: search must still work there."""
    q = few(ordqa, 2)

    async def in_loop():
        return http(bm25_server.url(), ordqa.corpus).search(q, 5)

    assert set(asyncio.run(in_loop()).scores) == set(q)


def test_index_remembers_ids_only():
    corpus = Corpus({"a": Document("a", "alpha text"), "b": Document("b", "beta text")})
    r = build("http", {"url": "http://127.0.0.1:9/r", "map_unknown": "text"}, ctx())
    r.index(corpus)
    assert r._map_text("ALPHA   text") == "a" and r._map_text("text") is None  # ambiguous: not guessed
    assert r.describe()["strategy"] == "http" and "http_failed" not in r.describe()
