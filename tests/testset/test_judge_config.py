"""lab.testset.judge_config: the one config of judging and judge-checking refuses a bad setting before any work,
naming the flag."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.testset.judge_config import MIN_KAPPA, JudgeConfig


@pytest.mark.parametrize("kwargs, message", [
    ({"depth": 0}, "--depth 0: must be >= 1"),
    ({"strategies": []}, "--strategies: name at least one strategy"),
    ({"strategies": ["bm25", "nope"]}, "--strategies: unknown nope"),
    ({"grammar": "sometimes"}, "--grammar 'sometimes': choose one of fallback, always, never"),
    ({"check_pairs": -1}, "--check-pairs -1: must be >= 0"),
    ({"min_kappa": 1.5}, "--min-kappa 1.5: a kappa lies in"),
])
def test_a_bad_setting_names_its_flag(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        JudgeConfig(**kwargs).check()


def test_the_defaults_pass_and_the_card_floor_is_the_data_layers():
    cfg = JudgeConfig()
    cfg.check()
    assert cfg.min_kappa == MIN_KAPPA and cfg.check_pairs == 20 and cfg.resamples == 1000
