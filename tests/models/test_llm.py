"""lab.models.llm: the local GGUF backend (real SmolLM2 generations), the factory, params, messages and cache keys.

The HTTP backend and its fault paths are in tests/models/test_llm_http.py.
"""
from __future__ import annotations

import hashlib
import pickle

import pytest

from lab.core.errors import ConfigError
from lab.models.llm import (
    LLM,
    Completion,
    LLMError,
    LocalLLM,
    OpenAILLM,
    default_threads,
    generation_params,
    idle_cores,
    load_llm,
    normalize_messages,
    prompt_messages,
    public_base_url,
    request_key,
    smollm2_path,
)

IDENTITY_RE = r"gguf:SmolLM2-135M-Instruct\.Q4_1\.gguf@sha256:[0-9a-f]{16}"


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for name in ("LAB_LLM_API_KEY", "OPENAI_API_KEY", "LAB_LLM_BASE_URL", "OPENAI_BASE_URL", "LAB_LLM_MODEL",
                 "LAB_LLM_THREADS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    """The packaged SmolLM2, loaded once for the module, caching into a fresh store."""
    llm = load_llm(None, cache_dir=tmp_path_factory.mktemp("llmcache"), progress=False)
    yield llm
    llm.close()


# ------------------------------------------------------------------------------------------------ local backend
def test_identity_names_file_and_sha256(smol):
    assert isinstance(smol, LocalLLM) and isinstance(smol, LLM)
    digest = hashlib.sha256(smollm2_path().read_bytes()).hexdigest()
    assert smol.identity == f"gguf:SmolLM2-135M-Instruct.Q4_1.gguf@sha256:{digest[:16]}"
    assert smol.describe()["identity"] == smol.identity and smol.describe()["defaults"]["temperature"] == 0.0


def test_real_generation_is_deterministic_and_accounted(smol):
    before = smol.usage()
    c = smol.complete("What is the capital of France?", max_tokens=8)
    assert isinstance(c, Completion) and not c.cached and c.model == smol.identity
    assert c.text.strip() and 1 <= c.completion_tokens <= 8 and c.prompt_tokens > 5
    assert c.finish_reason in ("stop", "length")
    # temperature 0: the model answers the same when asked again (bypassing the cache)
    fresh = LocalLLM(smol.path, cache_dir=None, progress=False)
    assert fresh.complete("What is the capital of France?", max_tokens=8).text == c.text
    after = smol.usage()
    assert after["generated"] - before["generated"] == 1
    assert after["completion_tokens"] - before["completion_tokens"] == c.completion_tokens
    assert after["seconds"] > before["seconds"] and after["load_seconds"] > 0


def test_chat_with_system_turn_and_params(smol):
    c = smol.chat([{"role": "system", "content": "Answer with one word."},
                   {"role": "user", "content": "Name a colour."}], max_tokens=4, seed=3, stop=["\n"])
    assert c.text.strip() and c.completion_tokens <= 4


def test_rerun_from_cache_never_loads_the_model(smol):
    first = smol.complete("Name a fruit.", max_tokens=6)
    rerun = LocalLLM(smol.path, cache_dir=smol.cache_dir, progress=False)
    again = rerun.complete("Name a fruit.", max_tokens=6)
    assert again.cached and again.text == first.text and again.completion_tokens == first.completion_tokens
    assert rerun._server is None  # answered without loading the GGUF
    assert rerun.usage() == {"calls": 1, "cache_hits": 1, "generated": 0, "prompt_tokens": 0,
                             "completion_tokens": 0, "retries": 0, "errors": 0, "seconds": 0.0,
                             "load_seconds": 0.0, "cold_seconds": pytest.approx(first.gen_seconds),
                             "retry_wait_seconds": 0.0}
    assert first.gen_seconds > 0 and again.gen_seconds == pytest.approx(first.gen_seconds)


def test_is_cached_answers_without_generating(smol):
    assert not smol.is_cached("Name a vegetable.", max_tokens=5)
    before = smol.usage()
    assert not smol.is_cached("Name a vegetable.", max_tokens=5)  # asking twice generates nothing
    assert smol.usage() == before
    smol.complete("Name a vegetable.", max_tokens=5)
    assert smol.is_cached("Name a vegetable.", max_tokens=5)
    assert smol.is_cached([{"role": "user", "content": "Name a vegetable."}], max_tokens=5)  # the same request
    assert not smol.is_cached("Name a vegetable.", max_tokens=6)  # other params, other answer
    assert not LocalLLM(smol.path, cache_dir=None, progress=False).is_cached("Name a vegetable.", max_tokens=5)


def test_map_keeps_input_order(smol):
    items = ["Name a fruit.", [{"role": "user", "content": "Name an animal."}], "Name a fruit."]
    out = smol.map(items, max_tokens=6)
    assert len(out) == 3 and out[0].text == out[2].text
    assert out[1].text == smol.chat(items[1], max_tokens=6).text


def test_context_overflow_is_a_clear_error(tmp_path):
    llm = LocalLLM(smollm2_path(), n_ctx=256, cache_dir=None, progress=False)
    with pytest.raises(LLMError, match=r"raise n_ctx \(now 256\)") as e:
        llm.complete("word " * 600, max_tokens=4)
    assert str(smollm2_path()) in str(e.value) and llm.usage()["errors"] == 1


def test_pickle_round_trip_reloads_lazily(smol):
    clone = pickle.loads(pickle.dumps(smol))
    assert clone.identity == smol.identity and clone._server is None


def test_bad_settings(tmp_path):
    with pytest.raises(ConfigError, match="n_ctx must be >= 256"):
        LocalLLM(smollm2_path(), n_ctx=64, cache_dir=None)


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a model at all")
    llm = LocalLLM(bad, cache_dir=None)
    with pytest.raises(LLMError, match="could not load the model"):
        llm.complete("hi", max_tokens=2)
    assert llm.usage()["errors"] == 1


# ------------------------------------------------------------------------------------------------ factory
def test_load_llm_local_specs(smol, tmp_path):
    for spec in ("local", "smollm2", str(smollm2_path()), {"backend": "gguf", "path": str(smollm2_path())}):
        llm = load_llm(spec, cache_dir=None)
        assert isinstance(llm, LocalLLM) and llm.identity == smol.identity
    assert load_llm(smol) is smol
    assert load_llm({"backend": "local", "threads": 2, "n_ctx": 512}, cache_dir=None).describe()["threads"] == 2
    with pytest.raises(ConfigError, match="missing.gguf"):
        load_llm(str(tmp_path / "missing.gguf"))


@pytest.mark.parametrize(("cores", "idle", "threads"), [(2, 1.9, 2), (2, 1.4, 1), (2, 0.3, 1), (2, 0.0, 1),
                                                         (16, 12.0, 8), (4, 2.6, 3), (1, 1.0, 1)])
def test_default_threads_are_the_idle_cores(monkeypatch, cores, idle, threads):
    """llama.cpp threads spin-wait on each other, so a thread without a free core stalls the rest: the default is
    the cores this process may use that are idle now, at least 1, at most 8."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr("lab.models.llm.idle_cores", lambda n: idle)
    assert default_threads() == threads


def test_idle_cores_reads_the_machine_now():
    """Measured over a short interval from /proc/stat: between 0 and the cores this process may use; a busy loop
    on one of them is seen within the interval."""
    import os
    import threading

    n = len(os.sched_getaffinity(0))
    assert 0.0 <= idle_cores(n) <= n
    stop = threading.Event()
    spin = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)], daemon=True)
    spin.start()
    try:
        busy = idle_cores(n, seconds=0.3)
    finally:
        stop.set()
        spin.join()
    assert busy <= n - 0.5


def test_local_llm_threads_are_chosen_when_the_model_loads(monkeypatch):
    """The idle cores are read when the model loads, not when the object is made (a rerun answered from the cache
    never measures them), and describe() says what was used once it is known."""
    calls = []
    monkeypatch.setattr("lab.models.llm.default_threads", lambda: calls.append(1) or 1)
    llm = LocalLLM(None, cache_dir=None)
    assert llm.describe()["threads"] == "auto" and not calls
    assert llm.complete("Say yes.", max_tokens=2).text is not None
    assert calls == [1] and llm.threads_used == 1 and llm.describe()["threads"] == 1
    assert LocalLLM(None, cache_dir=None, threads=1).describe()["threads"] == 1


def test_llm_threads_from_the_environment(monkeypatch):
    """$LAB_LLM_THREADS fixes the default (a parallel sweep sets it in each worker to its share of the cores)."""
    monkeypatch.setattr("lab.models.llm.idle_cores", lambda n: pytest.fail("measured despite LAB_LLM_THREADS"))
    monkeypatch.setenv("LAB_LLM_THREADS", "3")
    assert default_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("LAB_LLM_THREADS", bad)
        with pytest.raises(ConfigError, match="LAB_LLM_THREADS=.*integer >= 1"):
            default_threads()
        with pytest.raises(ConfigError, match="LAB_LLM_THREADS="):  # refused when the object is made, before work
            LocalLLM(None, cache_dir=None)


def test_load_llm_openai_specs(monkeypatch):
    monkeypatch.setenv("LAB_LLM_BASE_URL", "http://127.0.0.1:8000/v1/")
    assert load_llm("openai:gpt-4o-mini", cache_dir=None).identity == "openai:http://127.0.0.1:8000/v1#gpt-4o-mini"
    assert load_llm("openai:llama3.1:8b", cache_dir=None).model == "llama3.1:8b"  # Ollama tags keep their colon
    with pytest.raises(ConfigError, match="LAB_LLM_MODEL"):
        load_llm("openai", cache_dir=None)
    monkeypatch.setenv("LAB_LLM_MODEL", "qwen")
    assert load_llm("openai", cache_dir=None).identity.endswith("#qwen")
    monkeypatch.delenv("LAB_LLM_BASE_URL")
    assert OpenAILLM("gpt-4o-mini", cache_dir=None).identity == "openai:https://api.openai.com/v1#gpt-4o-mini"


@pytest.mark.parametrize("spec, match", [
    ("gpt-4o", "expected 'local'"),
    ({"backend": "bedrock"}, "field 'backend'"),
    ({"backend": "openai", "model": "m", "temprature": 0}, "unknown fields"),
    ({"backend": "openai", "model": "m", "api_key": "sk-x"}, "api_key_env"),
    ({"backend": "openai", "model": "m", "base_url": "127.0.0.1:8000"}, "http"),
])
def test_load_llm_rejects_bad_specs(spec, match):
    with pytest.raises(ConfigError, match=match):
        load_llm(spec, cache_dir=None)


# ------------------------------------------------------------------------------------------------ pure helpers
def test_generation_params_defaults_types_and_reserved():
    d = {"max_tokens": 256, "temperature": 0.0, "seed": 0}
    assert generation_params(d, {}) == d
    assert generation_params(d, {"temperature": 0}) == d  # same key as the default
    assert generation_params(d, {"max_tokens": "8", "stop": "\n"}) == {**d, "max_tokens": 8, "stop": ["\n"]}
    for bad in ({"model": "x"}, {"stream": True}, {"max_tokens": 0}, {"temperature": -1}, {"top_k": object()}):
        with pytest.raises(ConfigError):
            generation_params(d, bad)


def test_messages_are_checked_with_index_and_field():
    assert prompt_messages("q", "sys") == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
    with pytest.raises(ConfigError, match=r"messages\[1\], field 'role'"):
        normalize_messages([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}])
    with pytest.raises(ConfigError, match=r"messages\[0\], field 'content'"):
        normalize_messages([{"role": "user", "content": None}])
    with pytest.raises(ConfigError, match="complete"):
        normalize_messages("just a string")


def test_request_key_depends_on_identity_messages_and_params():
    m = prompt_messages("q")
    p = {"max_tokens": 8, "temperature": 0.0, "seed": 0}
    k = request_key("gguf:a@sha256:1", m, p)
    assert k == request_key("gguf:a@sha256:1", [dict(x) for x in m], dict(reversed(list(p.items()))))
    assert k != request_key("gguf:b@sha256:1", m, p)
    assert k != request_key("gguf:a@sha256:1", prompt_messages("q "), p)
    assert k != request_key("gguf:a@sha256:1", m, {**p, "seed": 1})


def test_public_base_url():
    assert public_base_url("https://u:secret@example.com:8443/v1/?k=v#f") == "https://example.com:8443/v1"
    with pytest.raises(ConfigError):
        public_base_url("ftp://example.com")


def test_a_json_schema_is_enforced_as_a_grammar(smol):
    """A response_format json_schema reaches llama.cpp as the grammar made from it: the packaged SmolLM2's answer is
    the schema's JSON (sent as response_format, this llama.cpp build let it write past the closing brace and then
    refused its own output). The cache key says so: answers made the old way are not reused."""
    import json
    import re

    schema = {"type": "object", "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": 40},
                                               "question": {"type": "string", "pattern": "^(Why) [^?\\n]{10,80}[?]$"}},
              "required": ["answer", "question"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "qa", "strict": True, "schema": schema}}
    prompt = ('Write a question about this passage as JSON {"question": "...", "answer": "..."}.\n\nPassage:\n'
              "SQLite stores the whole database in one file, so copying the file copies the database.")
    c = smol.complete(prompt, max_tokens=120, response_format=rf)
    got = json.loads(c.text)
    assert list(got) == ["answer", "question"]
    assert re.match(schema["properties"]["question"]["pattern"], got["question"])
    assert 1 <= len(got["answer"]) <= 40 and c.finish_reason == "stop"
    # the grammar keeps the schema's key order: the model writes the first property first (testset's --write-first)
    flipped = {**schema, "properties": dict(reversed(schema["properties"].items())), "required": ["question", "answer"]}
    rf2 = {"type": "json_schema", "json_schema": {"name": "qa", "strict": True, "schema": flipped}}
    assert list(json.loads(smol.complete(prompt, max_tokens=120, response_format=rf2).text)) == ["question", "answer"]
    params = generation_params(smol.defaults, {"max_tokens": 120, "response_format": rf})
    sent = smol._request([{"role": "user", "content": prompt}], params)
    assert "response_format" not in sent and isinstance(sent["grammar"], str) and sent["max_tokens"] == 120
    assert smol._key_params(params) != params and smol._key_params({"max_tokens": 5}) == {"max_tokens": 5}
    assert smol.is_cached(prompt, max_tokens=120, response_format=rf)
