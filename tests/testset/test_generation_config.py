"""lab.testset.generation_config: a bad setting is one ConfigError naming the field and what it accepts, before any
work; max_attempts defaults to a cap from n."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.testset.generation_config import GenerationConfig


@pytest.mark.parametrize("kwargs, message", [
    ({"max_consecutive_failures": 0}, "max_consecutive_failures=0: expected an integer >= 1"),
    ({"n": 0}, "n=0: ask for at least one question"),
    ({"stratify": "random"}, "stratify='random': use one of"),
    ({"retry_on": "always"}, "retry_on='always': use one of"),
    ({"write_first": "both"}, "write_first='both': use one of"),
    ({"grade": 4}, "grades must lie in 0..3"),
])
def test_a_bad_setting_names_its_field(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        GenerationConfig(**kwargs)


def test_the_defaults_describe_themselves():
    cfg = GenerationConfig(n=10)
    d = cfg.describe()
    assert d["n"] == 10 and d["max_attempts"] == cfg.attempts_cap > 10 and d["write_first"] == "question"
