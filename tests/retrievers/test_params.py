"""Declared strategy params (lab.retrievers.params + the registry): a contract over every registered strategy."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.retrievers.base import available, check_params, declared_params, param_problems
from lab.retrievers.params import Param, at_least, between, check_value, conforms, one_of, type_text

STRATEGIES = available()


def _typed_param(name: str) -> Param:
    """A declared param of strategy ``name`` whose type refuses a mapping (a wrong type for it)."""
    for p in declared_params(name).params.values():
        if p.annotation is not None and not conforms({"x": 1}, p.annotation):
            return p
    raise AssertionError(f"{name} declares no typed param")


def test_every_strategy_is_declared():
    assert {"bm25", "dense", "hybrid", "rerank", "hybrid_rerank", "hyde", "qna", "kg", "raptor", "multi_query",
            "step_back", "dense_ft", "http"} <= set(STRATEGIES)
    for name in STRATEGIES:
        decl = declared_params(name)
        assert decl.params, name
        assert all(p.name == key for key, p in decl.params.items())


@pytest.mark.parametrize("name", STRATEGIES)
def test_defaults_are_valid(name):
    decl = declared_params(name)
    defaults = {k: p.default for k, p in decl.params.items() if p.default is not None}
    assert param_problems(name, defaults) == []
    assert param_problems(name, {}) == [] and param_problems(name, None) == []


@pytest.mark.parametrize("name", STRATEGIES)
def test_unknown_name_is_one_line_listing_the_accepted(name):
    problems = param_problems(name, {"no_such_param_x": 1})
    assert len(problems) == 1
    line = problems[0]
    assert "'no_such_param_x'" in line and "accepts" in line and "\n" not in line
    some = next(iter(declared_params(name).params))
    assert some in line
    with pytest.raises(ConfigError, match="no_such_param_x"):
        check_params(name, {"no_such_param_x": 1})


@pytest.mark.parametrize("name", STRATEGIES)
def test_wrong_type_is_one_line_naming_the_param(name):
    p = _typed_param(name)
    problems = param_problems(name, {p.name: {"x": 1}})
    assert len(problems) == 1 and f"{p.name}=" in problems[0] and "takes" in problems[0], problems


@pytest.mark.parametrize("name, params, expect", [
    ("bm25", {"k1x": 1}, "unknown param 'k1x'; bm25 accepts: b, backend"),
    ("dense", {"modelx": 1}, "unknown param 'modelx'; dense accepts:"),
    ("rerank", {"foo": 1}, "unknown param 'foo'; rerank accepts:"),
    ("hybrid", {"foo": 1}, "unknown param 'foo'; hybrid accepts retrievers"),
    ("bm25", {"k1": "abc"}, "k1='abc' is not valid; k1 takes a number >= 0 (default 0.9)"),
    ("dense", {"batch_size": "abc"}, "batch_size='abc' is not valid; batch_size takes an integer >= 1"),
    ("rerank", {"alpha": "abc"}, "alpha='abc' is not valid; alpha takes a number between 0 and 1, or null"),
    ("hybrid", {"rrf_k": "abc"}, "rrf_k='abc' is not valid; rrf_k takes an integer >= 0"),
    ("rerank", {"top_n": 0}, "top_n=0 is not valid; top_n takes an integer >= 1"),
    ("hybrid", {"depth": -1}, "depth=-1 is not valid"),
    ("bm25", {"k1": True}, "k1=True is not valid"),
    ("hybrid", {"bm25": {"k1": "x"}}, "strategy hybrid: bm25: param k1='x'"),
    ("hybrid", {"retrievers": ["bm25", {"strategy": "dense", "modelx": 1}]}, "unknown param 'modelx'"),
    ("hybrid", {"retrievers": ["bm25", "nosuch"]}, "unknown strategy 'nosuch'"),
    ("rerank", {"first_stage_params": {"k2": 1}}, "first_stage_params: unknown param 'k2'; bm25 accepts"),
    ("rerank", {"first_stage": "dense", "first_stage_params": {"k1": 1}}, "unknown param 'k1'; dense accepts"),
    ("hyde", {"batch_size": 0}, "batch_size=0 is not valid"),
    ("hyde", {"foo": 1}, "hyde accepts: M, backend, batch_size"),
    ("multi_query", {"base_params": {"bm25": {"b": 3}}}, "base_params: bm25: param b=3"),
    ("hybrid_rerank", {"first_stage": "bm25"}, "takes one of 'hybrid' (default 'hybrid')"),
    ("nosuch", {}, "unknown strategy 'nosuch'; registered: bm25"),
])
def test_bad_params_are_named(name, params, expect):
    problems = param_problems(name, params)
    assert problems and expect in problems[0], problems


def test_valid_values_pass():
    assert param_problems("bm25", {"k1": 1, "b": 0.75, "variant": "bm25+", "stem": False}) == []
    assert param_problems("hybrid", {"fusion": "weighted", "weights": [0.3, 0.7], "bm25": {"k1": 1.2},
                                     "dense": {"model": "all-MiniLM-L6-v2"}}) == []
    assert param_problems("rerank", {"reranker": "biencoder", "alpha": 0.5, "top_n": 50}) == []
    assert param_problems("kg", {"base": None, "base_params": {"anything": 1}}) == []  # no base: nothing to check


def test_type_and_rule_helpers():
    import numpy as np

    assert conforms(1, float) and not conforms(True, float) and not conforms("1", float)
    assert conforms(np.int64(3), int) and conforms([1, 2.5], list[float]) and not conforms("ab", list[str])
    assert conforms(None, int | None) and not conforms(None, int)
    assert type_text(float | None) == "a number or null" and type_text(list[str]) == "a list of strings"
    p = Param("k1", float, 0.9, at_least(0))
    assert check_value(p, -1) == "a number >= 0" and check_value(p, 0) is None
    assert check_value(Param("b", float, 0.4, between(0, 1)), 1.5) == "a number between 0 and 1"
    assert check_value(Param("m", str, "a", one_of("a", "b")), "c") == "one of 'a', 'b'"


def test_lab_strategies_lists_declared_params(capsys):
    from lab.cli.main import main

    assert main(["strategies", "--params"]) == 0
    out = capsys.readouterr().out
    assert ("bm25\n  backend: one of 'bm25s', 'bm25s-eager', 'rank_bm25' (default 'bm25s')\n"
            "  k1: a number >= 0 (default 0.9)") in out
    assert "  alpha: a number between 0 and 1, or null (default None)" in out
    assert "hyde\n" in out and "... and the params of dense" in out


def test_registration_declares_from_the_signature_and_refuses_rules_for_unknown_params():
    from lab.retrievers.base import register, unregister

    try:
        @register("tmp_declared", rules={"depth": at_least(1)})
        def _factory(ctx, *, depth: int = 10, name: str | None = None):
            raise AssertionError("never built here")

        @register("tmp_plugin")
        def _plugin(ctx, **params):  # an outside plugin declaring nothing: its params pass unchecked
            raise AssertionError("never built here")

        assert sorted(declared_params("tmp_declared").params) == ["depth", "name"]
        assert param_problems("tmp_declared", {"depth": 0}) == [
            "strategy tmp_declared: param depth=0 is not valid; depth takes an integer >= 1 (default 10)"]
        assert param_problems("tmp_plugin", {"anything": 1}) == []
        with pytest.raises(TypeError, match="rules for undeclared params"):
            register("tmp_bad", rules={"nope": at_least(0)})(_factory)
    finally:
        for name in ("tmp_declared", "tmp_plugin", "tmp_bad"):
            unregister(name)
