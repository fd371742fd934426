"""Fixtures of the lab.models.llm tests: no LLM settings from the environment, and the packaged SmolLM2 loaded once
for the package."""
from __future__ import annotations

import pytest

from lab.models.llm import load_llm


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for name in ("LAB_LLM_API_KEY", "OPENAI_API_KEY", "LAB_LLM_BASE_URL", "OPENAI_BASE_URL", "LAB_LLM_MODEL",
                 "LAB_LLM_THREADS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="package")
def smol(tmp_path_factory):
    """The packaged SmolLM2, loaded once for the package's tests, caching into a fresh store."""
    llm = load_llm(None, cache_dir=tmp_path_factory.mktemp("llmcache"), progress=False)
    yield llm
    llm.close()
