"""lab.models.llm.http: a real OpenAI-compatible server, and the fault paths against one that misbehaves.

The real server is llama.cpp's own HTTP server (xllamacpp.Server listens on 127.0.0.1) serving the packaged SmolLM2
GGUF, locked with an API key, so a request without the right key fails: the backend's Authorization header is
exercised too. The faulty server is a small aiohttp app on 127.0.0.1 whose route picks the fault
(``/<fault>-<name>/v1/chat/completions``) and counts the attempts it receives.
"""
from __future__ import annotations

import asyncio
import collections
import json
import pickle
import socket
import threading
import time
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.models.llm import LLMError, LocalLLM, OpenAILLM, load_llm
from lab.models.llm.http import public_base_url
from lab.models.llm.local import smollm2_path

SERVER_KEY = "sk-test-llamacpp-0123456789abcdef"
SECRET = "sk-proj-SECRETSECRET-9f8e7d6c5b4a"
FAST = dict(backoff_s=0.01, max_backoff_s=0.05, progress=False)


# ------------------------------------------------------------------------------------------------ servers
@pytest.fixture(scope="module")
def llamacpp_url():
    """``http://127.0.0.1:<port>/v1`` of a real llama.cpp server running SmolLM2 (needs the API key)."""
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = str(smollm2_path())
    p.n_ctx = 512
    p.n_parallel = 1
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = 1
    p.verbosity = -1
    p.api_keys = [SERVER_KEY]
    server = xlc.Server(p)
    address = server.listening_address
    assert address.startswith("http://127.0.0.1:")
    yield address.rstrip("/") + "/v1"
    del server


class FaultServer:
    """aiohttp app in a background thread; ``hits[scenario]`` counts requests, ``max_inflight`` the peak load."""

    def __init__(self):
        self.hits: collections.Counter = collections.Counter()
        self.auth: dict[str, str | None] = {}
        self.bodies: dict[str, dict] = {}
        self.inflight = self.max_inflight = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(20), "fault server did not start"

    def url(self, scenario: str) -> str:
        return f"http://127.0.0.1:{self.port}/{scenario}/v1"

    def _run(self):
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/{scenario}/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()

    def stop(self):
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @staticmethod
    def ok_body(request_json: dict) -> dict:
        content = request_json["messages"][-1]["content"]
        return {"id": "x", "object": "chat.completion", "model": request_json["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "echo: " + content}}],
                "usage": {"prompt_tokens": len(content.split()), "completion_tokens": 2, "total_tokens": 0}}

    async def _handle(self, request):
        from aiohttp import web

        scenario = request.match_info["scenario"]
        kind = scenario.split("-")[0]
        with self._lock:
            self.hits[scenario] += 1
            n = self.hits[scenario]
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            body = await request.json()
            self.auth[scenario] = request.headers.get("Authorization")
            self.bodies[scenario] = body
            ok = web.json_response(self.ok_body(body))
            if kind == "ok":
                return ok
            if kind == "slow":
                await asyncio.sleep(0.3)
                return ok
            if kind == "timeout":
                await asyncio.sleep(1.5)
                return ok
            if kind == "e500":
                return web.Response(status=500, text="internal error: out of memory")
            if kind == "flaky500":
                return ok if n > 2 else web.Response(status=503, text="overloaded")
            if kind == "r429":
                return ok if n > 1 else web.Response(status=429, headers={"Retry-After": "1"}, text="slow down")
            if kind == "r429long":
                return web.Response(status=429, headers={"Retry-After": "1000"}, text="slow down")
            if kind == "malformed":
                return web.Response(status=200, text='{"choices": [', content_type="application/json")
            if kind == "malformedonce":
                return ok if n > 1 else web.Response(status=200, text="<html>gateway</html>")
            if kind == "noschema":
                return web.json_response({"result": "hello"})
            if kind == "e401":  # echoes the key it got, as some servers do
                return web.json_response({"error": {"message": f"Incorrect API key provided: "
                                                    f"{request.headers.get('Authorization')}"}}, status=401)
            if kind == "e400":
                return web.json_response({"error": {"message": "max_tokens is too large"}}, status=400)
            return web.Response(status=404, text="no such scenario")
        finally:
            with self._lock:
                self.inflight -= 1


@pytest.fixture(scope="module")
def faults():
    server = FaultServer()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _no_key_env(monkeypatch):
    for name in ("LAB_LLM_API_KEY", "OPENAI_API_KEY", "LAB_LLM_BASE_URL", "OPENAI_BASE_URL", "LAB_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)


# ------------------------------------------------------------------------------------------------ real server
def test_real_llamacpp_server_generates_and_matches_in_process(llamacpp_url, tmp_path):
    prompt = "What is the capital of France?"
    llm = OpenAILLM("smollm2", llamacpp_url, api_key=SERVER_KEY, cache_dir=tmp_path, progress=False)
    first = llm.complete(prompt, max_tokens=8)
    assert first.text.strip() and not first.cached
    assert 1 <= first.completion_tokens <= 8 and first.prompt_tokens > 5
    assert first.model == llm.identity == f"openai:{llamacpp_url}#smollm2"
    # the same GGUF in-process, temperature 0: the same answer
    local = LocalLLM(smollm2_path(), n_ctx=512, cache_dir=None, progress=False)
    assert local.complete(prompt, max_tokens=8).text == first.text
    # a rerun is answered from the cache, by a new object too
    again = OpenAILLM("smollm2", llamacpp_url, api_key=SERVER_KEY, cache_dir=tmp_path, progress=False)
    second = again.complete(prompt, max_tokens=8)
    assert second.cached and second.text == first.text and second.seconds < first.seconds
    assert again.usage()["generated"] == 0 and again.usage()["cache_hits"] == 1
    u = llm.usage()
    assert u["calls"] == 1 and u["generated"] == 1 and u["completion_tokens"] == first.completion_tokens
    assert u["seconds"] > 0


def test_real_server_refuses_wrong_key_without_retry(llamacpp_url, tmp_path):
    llm = OpenAILLM("smollm2", llamacpp_url, api_key="sk-wrong-key-000000000000", cache_dir=None, **FAST)
    with pytest.raises(LLMError) as e:
        llm.complete("hi", max_tokens=2)
    assert e.value.status == 401 and e.value.attempts == 1
    assert "LAB_LLM_API_KEY" in str(e.value) and llamacpp_url in str(e.value)
    assert "sk-wrong-key-000000000000" not in str(e.value)


# ------------------------------------------------------------------------------------------------ fault paths
def test_timeout_retried_then_clear_error(faults):
    llm = OpenAILLM("m", faults.url("timeout-a"), timeout=0.2, max_retries=2, cache_dir=None, **FAST)
    t0 = time.perf_counter()
    with pytest.raises(LLMError) as e:
        llm.complete("hi")
    assert faults.hits["timeout-a"] == 3 and e.value.attempts == 3
    assert e.value.status == "timeout" and "raise timeout" in str(e.value)
    assert time.perf_counter() - t0 < 5
    assert llm.usage()["retries"] == 2 and llm.usage()["errors"] == 1


def test_500_retried_then_error_names_endpoint_status_and_next_step(faults):
    llm = OpenAILLM("m", faults.url("e500-a"), max_retries=2, cache_dir=None, **FAST)
    with pytest.raises(LLMError) as e:
        llm.complete("hi")
    msg = str(e.value)
    assert faults.hits["e500-a"] == 3
    assert faults.url("e500-a") + "/chat/completions" in msg and "HTTP 500 after 3 attempts" in msg
    assert "out of memory" in msg and "max_retries" in msg


def test_flaky_5xx_recovers(faults):
    llm = OpenAILLM("m", faults.url("flaky500-a"), max_retries=3, cache_dir=None, **FAST)
    c = llm.complete("hello there")
    assert c.text == "echo: hello there" and faults.hits["flaky500-a"] == 3
    assert llm.usage()["retries"] == 2 and llm.usage()["generated"] == 1 and llm.usage()["errors"] == 0


def test_retry_waits_are_counted_apart_from_generation_time(faults):
    """Backoff sleeps are counted (retry_wait_seconds) and left out of seconds / gen_seconds."""
    llm = OpenAILLM("m", faults.url("flaky500-wait"), max_retries=3, cache_dir=None, backoff_s=0.3, max_backoff_s=0.3,
                    progress=False)
    c = llm.complete("hello there")
    u = llm.usage()
    assert u["retries"] == 2 and u["errors"] == 0 and 0.3 <= u["retry_wait_seconds"] <= 0.9  # jitter 0.5-1.5
    assert c.seconds >= u["retry_wait_seconds"]  # the caller's wall time includes the sleeps ...
    assert c.gen_seconds < u["retry_wait_seconds"] and u["seconds"] == pytest.approx(c.gen_seconds)  # ... these not


def test_query_time_llm_faults_reach_json_mlflow_and_leaderboard(faults, tmp_path, capsys, pytestconfig):
    """multi_query against an endpoint that fails twice then answers: --json, MLflow and `lab compare` carry the
    retries / errors / retry waits of the query phase, and latency excludes the waits."""
    from conftest import blank_store

    from lab.analysis.compare import experiment_leaderboard, format_leaderboard
    from lab.cli.main import main
    from lab.tracking.store import client

    root = blank_store(tmp_path, pytestconfig)
    llm = (f"{{backend: openai, base_url: '{faults.url('flaky500-mq')}', model: m, max_retries: 3, backoff_s: 0.4, "
           "max_backoff_s: 0.4}")
    data = str(Path(__file__).resolve().parents[3] / "data" / "ord-qa")
    rc = main(["run", "--dataset", data, "--strategy", "multi_query", "--set", f"llm={llm}", "--set", "base=bm25",
               "--max-queries", "3", "--json", "--no-progress", "--experiment", "faults", "--tracking-root", str(root),
               "--cache-dir", str(tmp_path / "cache")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and faults.hits["flaky500-mq"] == 5  # 3 queries, the first 2 requests failed
    assert out["llm_query_retries"] == 2 and out["llm_query_errors"] == 0 and out["llm_index_retries"] == 0
    wait = out["llm_query_retry_wait_seconds"]
    assert 0.4 <= wait <= 1.2
    assert out["latency_p99_ms"] < 1000 * wait  # no query's latency holds a backoff sleep
    assert "excluded" in out["_meta"]["retriever"]["latency"]
    run = client(root).get_run(out["_meta"]["mlflow_run_id"])
    assert run.data.metrics["llm_query_retries"] == 2 and run.data.metrics["llm_query_retry_wait_seconds"] == wait
    df = experiment_leaderboard("faults", tracking_root=root, n_resamples=100)
    assert df["llm_query_retries"].tolist() == [2.0] and df["llm_query_errors"].tolist() == [0.0]
    assert "LLM query retry/err/wait s" in format_leaderboard(df) and f"2 / 0 / {wait:.1f}" in format_leaderboard(df)


def test_429_waits_for_retry_after(faults):
    llm = OpenAILLM("m", faults.url("r429-a"), max_retries=3, cache_dir=None, **FAST)
    t0 = time.perf_counter()
    c = llm.complete("hi")
    elapsed = time.perf_counter() - t0
    assert c.text == "echo: hi" and faults.hits["r429-a"] == 2
    assert elapsed >= 1.0  # backoff alone would be <= 0.015 s: the server's Retry-After was obeyed


def test_429_with_too_long_retry_after_fails_at_once(faults):
    llm = OpenAILLM("m", faults.url("r429long-a"), max_retries=3, max_retry_after_s=30, cache_dir=None, **FAST)
    with pytest.raises(LLMError) as e:
        llm.complete("hi")
    assert faults.hits["r429long-a"] == 1 and "1000 s" in str(e.value) and e.value.status == 429


@pytest.mark.parametrize("kind", ["malformed", "noschema"])
def test_malformed_json_retried_once_then_fails(faults, kind):
    scenario = f"{kind}-a"
    llm = OpenAILLM("m", faults.url(scenario), max_retries=5, cache_dir=None, **FAST)
    with pytest.raises(LLMError) as e:
        llm.complete("hi")
    assert faults.hits[scenario] == 2
    assert "malformed response" in str(e.value) and "/v1" in str(e.value)


def test_malformed_once_recovers(faults):
    llm = OpenAILLM("m", faults.url("malformedonce-a"), cache_dir=None, **FAST)
    assert llm.complete("hi").text == "echo: hi" and faults.hits["malformedonce-a"] == 2


def test_client_errors_are_not_retried_and_keys_are_masked(faults):
    llm = OpenAILLM("m", faults.url("e401-a"), api_key=SECRET, cache_dir=None, **FAST)
    with pytest.raises(LLMError) as e:
        llm.complete("hi")
    assert faults.hits["e401-a"] == 1 and e.value.status == 401
    assert SECRET not in str(e.value) and "***" in str(e.value)
    llm = OpenAILLM("m", faults.url("e400-a"), cache_dir=None, **FAST)
    with pytest.raises(LLMError, match="max_tokens is too large"):
        llm.complete("hi")
    assert faults.hits["e400-a"] == 1


def test_connection_refused_is_immediate():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = OpenAILLM("m", f"http://127.0.0.1:{port}/v1", cache_dir=None, **FAST)
    with pytest.raises(LLMError, match="is the server running"):
        llm.complete("hi")


@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "LAB_LLM_BASE_URL"])
def test_the_connection_error_names_the_variable_the_user_set(variable, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("LAB_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv(variable, f"http://127.0.0.1:{port}/v1")
    other = ({"OPENAI_BASE_URL", "LAB_LLM_BASE_URL"} - {variable}).pop()
    with pytest.raises(LLMError) as e:
        OpenAILLM("m", cache_dir=None, **FAST).complete("hi")
    assert f"check {variable} (http://127.0.0.1:{port}/v1)" in str(e.value) and other not in str(e.value)


# ------------------------------------------------------------------------------------------------ concurrency
def test_map_respects_concurrency_limit_and_order(faults):
    faults.max_inflight = 0
    llm = OpenAILLM("m", faults.url("slow-a"), concurrency=3, cache_dir=None, **FAST)
    prompts = [f"prompt {i}" for i in range(9)]
    t0 = time.perf_counter()
    out = llm.map(prompts, concurrency=8)  # more threads than the LLM's limit: the semaphore holds
    elapsed = time.perf_counter() - t0
    assert [c.text for c in out] == ["echo: " + p for p in prompts]
    assert faults.hits["slow-a"] == 9 and faults.max_inflight == 3
    assert elapsed < 9 * 0.3 * 0.8  # ran concurrently (3 waves of 0.3 s), not one after another


def test_map_checks_every_item_before_any_request(faults):
    llm = OpenAILLM("m", faults.url("ok-check"), cache_dir=None, **FAST)
    with pytest.raises(ConfigError, match=r"messages\[0\], field 'role'"):
        llm.map(["fine", [{"role": "bot", "content": "x"}]])
    with pytest.raises(ConfigError, match="set by the LLM backend"):
        llm.map(["fine"], model="other")
    assert faults.hits["ok-check"] == 0
    llm.complete("fine", seed=None, top_p=0.5)  # None leaves the field out of the request
    assert "seed" not in faults.bodies["ok-check"] and faults.bodies["ok-check"]["top_p"] == 0.5


def test_map_raises_first_error(faults):
    llm = OpenAILLM("m", faults.url("e400-b"), cache_dir=None, **FAST)
    with pytest.raises(LLMError):
        llm.map(["a", "b", "c"])


# ------------------------------------------------------------------------------------------------ cache, secrets
def test_second_call_cached_no_request(faults, tmp_path):
    url = faults.url("ok-cache")
    llm = OpenAILLM("m", url, api_key=SECRET, cache_dir=tmp_path, **FAST)
    a = llm.complete("cache me", max_tokens=5)
    assert faults.hits["ok-cache"] == 1 and not a.cached
    b = OpenAILLM("m", url, cache_dir=tmp_path, **FAST).complete("cache me", max_tokens=5, temperature=0)
    assert b.cached and b.text == a.text and faults.hits["ok-cache"] == 1
    # other params, another model or another endpoint are other keys
    llm.complete("cache me", max_tokens=6)
    OpenAILLM("m2", url, cache_dir=tmp_path, **FAST).complete("cache me", max_tokens=5)
    assert faults.hits["ok-cache"] == 3
    # the request carried the defaults (temperature 0, seed) and the key; the store never holds the key
    assert faults.bodies["ok-cache"]["temperature"] == 0.0 and faults.bodies["ok-cache"]["seed"] == 0
    assert faults.auth["ok-cache"] is None  # the m2 object had no key
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in stored


def _fill_cache(url: str, cache_dir: str, prompts: list[str]) -> int:
    llm = OpenAILLM("m", url, cache_dir=cache_dir, concurrency=4, **FAST)
    llm.map(prompts)
    return llm.usage()["generated"]


def test_concurrent_writers_share_one_cache(faults, tmp_path):
    """Two processes fill the same store with the same 30 prompts at once; a third run costs no request."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    url, prompts = faults.url("ok-procs"), [f"question {i}" for i in range(30)]
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        generated = list(pool.map(_fill_cache, [url, url], [str(tmp_path)] * 2, [prompts, prompts[::-1]]))
    assert faults.hits["ok-procs"] == sum(generated) and 30 <= sum(generated) <= 60
    rerun = OpenAILLM("m", url, cache_dir=tmp_path, **FAST)
    out = rerun.map(prompts)
    assert all(c.cached for c in out) and [c.text for c in out] == ["echo: " + p for p in prompts]
    assert faults.hits["ok-procs"] == sum(generated)


def test_key_from_env_is_sent_but_never_shown(faults, monkeypatch):
    monkeypatch.setenv("LAB_LLM_API_KEY", SECRET)
    monkeypatch.setenv("LAB_LLM_BASE_URL", faults.url("ok-env"))
    llm = load_llm("openai:my-model", cache_dir=None, progress=False)
    llm.complete("hi")
    assert faults.auth["ok-env"] == f"Bearer {SECRET}" and faults.bodies["ok-env"]["model"] == "my-model"
    assert llm.identity == f"openai:{faults.url('ok-env')}#my-model"
    shown = json.dumps([llm.identity, llm.usage(), llm.describe(), repr(llm), str(llm), repr(vars(llm))])
    assert SECRET not in shown and llm.describe()["api_key_env"] == "LAB_LLM_API_KEY"
    clone = pickle.loads(pickle.dumps(llm))  # a worker process gets a working copy
    clone.complete("hi again")
    assert faults.auth["ok-env"] == f"Bearer {SECRET}"


def test_dict_spec_with_key_env_and_refusal_of_inline_keys(faults, monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    spec = {"backend": "openai", "base_url": faults.url("ok-dict"), "model": "m", "api_key_env": "MY_KEY",
            "max_retries": 1}
    llm = load_llm(spec, cache_dir=None, progress=False)
    llm.complete("hi")
    assert faults.auth["ok-dict"] == f"Bearer {SECRET}" and SECRET not in json.dumps(llm.describe())
    with pytest.raises(ConfigError, match="api_key_env"):
        load_llm({**spec, "api_key": SECRET})
    with pytest.raises(ConfigError, match="not set"):
        load_llm({**spec, "api_key_env": "SURELY_UNSET_VARIABLE_42"})


def test_identity_hides_url_credentials():
    llm = OpenAILLM("m", "http://user:pw@127.0.0.1:8000/v1/?token=abc", cache_dir=None)
    assert llm.identity == "openai:http://127.0.0.1:8000/v1#m"


def test_public_base_url():
    assert public_base_url("https://u:secret@example.com:8443/v1/?k=v#f") == "https://example.com:8443/v1"
    with pytest.raises(ConfigError):
        public_base_url("ftp://example.com")
