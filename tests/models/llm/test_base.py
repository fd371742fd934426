"""lab.models.llm.base: generation params, message checks and the cache key."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.models.llm.base import generation_params, normalize_messages, prompt_messages, request_key


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
