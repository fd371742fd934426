"""lab.models.llm.local: the local GGUF backend with real SmolLM2 generations (identity, determinism, cache,
accounting, map, pickling, bad files, threads chosen at load, a JSON schema as a grammar)."""
from __future__ import annotations

import hashlib
import json
import pickle
import re

import pytest

from lab.core.errors import ConfigError
from lab.models.llm import LLM, Completion, LLMError, LocalLLM
from lab.models.llm.base import generation_params
from lab.models.llm.local import smollm2_path


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


def test_local_llm_threads_are_chosen_when_the_model_loads(monkeypatch):
    """The idle cores are read when the model loads, not when the object is made (a rerun answered from the cache
    never measures them), and describe() says what was used once it is known."""
    calls = []
    monkeypatch.setattr("lab.models.llm.local.default_threads", lambda: calls.append(1) or 1)
    llm = LocalLLM(None, cache_dir=None)
    assert llm.describe()["threads"] == "auto" and not calls
    assert llm.complete("Say yes.", max_tokens=2).text is not None
    assert calls == [1] and llm.threads_used == 1 and llm.describe()["threads"] == 1
    assert LocalLLM(None, cache_dir=None, threads=1).describe()["threads"] == 1


def test_a_json_schema_is_enforced_as_a_grammar(smol):
    """A response_format json_schema reaches llama.cpp as the grammar made from it: the packaged SmolLM2's answer is
    the schema's JSON (sent as response_format, this llama.cpp build let it write past the closing brace and then
    refused its own output). The cache key says so: answers made the old way are not reused."""

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
