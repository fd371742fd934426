"""lab.retrievers.llmutil: an LLM strategy's LLM shares the strategy's cache folder, progress setting and seed, and
is named in describe() by identity and backend."""
from __future__ import annotations

from types import SimpleNamespace

from lab.models.llm import OpenAILLM
from lab.retrievers.base import Context
from lab.retrievers.llmutil import llm_describe, llm_for

SPEC = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}  # built only, never called


def test_llm_for_takes_cache_progress_and_seed_from_the_context(tmp_path):
    llm = llm_for(Context(cache_dir=tmp_path / "c", progress=False, seed=7), SPEC)
    assert isinstance(llm, OpenAILLM)
    assert llm.cache_dir == tmp_path / "c" and llm.progress is False and llm.seed == 7


def test_llm_for_lets_the_strategy_override_the_context(tmp_path):
    llm = llm_for(Context(cache_dir=tmp_path, progress=True, seed=7), SPEC, seed=3, progress=False)
    assert llm.seed == 3 and llm.progress is False


def test_llm_describe_names_identity_and_backend(tmp_path):
    llm = llm_for(Context(cache_dir=tmp_path, progress=False), SPEC)
    assert llm_describe(llm) == {"llm": "openai:http://127.0.0.1:9/v1#m", "llm_backend": "openai"}
    assert llm_describe(SimpleNamespace(identity="x")) == {"llm": "x", "llm_backend": "?"}
