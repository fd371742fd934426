"""lab.models.llm.factory: load_llm from names, paths, openai: specs and dicts; bad specs refused."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.models.llm import LocalLLM, OpenAILLM, load_llm
from lab.models.llm.local import smollm2_path


def test_load_llm_local_specs(smol, tmp_path):
    for spec in ("local", "smollm2", str(smollm2_path()), {"backend": "gguf", "path": str(smollm2_path())}):
        llm = load_llm(spec, cache_dir=None)
        assert isinstance(llm, LocalLLM) and llm.identity == smol.identity
    assert load_llm(smol) is smol
    assert load_llm({"backend": "local", "threads": 2, "n_ctx": 512}, cache_dir=None).describe()["threads"] == 2
    with pytest.raises(ConfigError, match="missing.gguf"):
        load_llm(str(tmp_path / "missing.gguf"))


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
