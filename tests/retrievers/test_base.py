"""lab.retrievers.base: the whole retriever contract (defaults for every optional method, no probing), params
declared once and checked by the registry (also on direct construction), one type for declaration extras, and
every registered param with a rule (a type, choices, or a stated reason)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document, Queries
from lab.retrievers.base import (
    BaseRetriever,
    ExtraKeys,
    Retriever,
    available,
    build,
    declared_params,
    param_problems,
    register,
    unregister,
)
from lab.retrievers.params import any_value, type_text

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Corpus({d.id: d for d in (Document("a", "the cat sat on the mat"), Document("b", "a dog in the fog"),
                                   Document("c", "cats and dogs"))})
QUERIES = Queries({"q1": "cat", "q2": "dog fog"})


def open_ended(param) -> bool:
    """A param that takes any value without saying why: no type, no choices, no stated reason."""
    rule = param.rule
    return type_text(param.annotation) == "any value" and not (rule is not None and (rule.choices or rule.why))


def test_every_registered_param_has_a_type_choices_or_a_reason():
    loose = [f"{name}.{p.name}" for name in available() for p in declared_params(name).params.values()
             if open_ended(p)]
    assert loose == [], f"params that take any value without a stated reason: {loose}"


def test_the_walk_fails_on_an_open_param_unless_it_states_why():
    try:
        @register("tmp_open")
        def _open(ctx, *, anything=None):
            raise AssertionError("never built here")

        @register("tmp_reasoned", rules={"anything": any_value("a Python object handed over in code")})
        def _reasoned(ctx, *, anything=None):
            raise AssertionError("never built here")

        assert open_ended(declared_params("tmp_open").params["anything"])
        reasoned = declared_params("tmp_reasoned").params["anything"]
        assert not open_ended(reasoned)
        assert reasoned.expected() == "any value (a Python object handed over in code)"
    finally:
        unregister("tmp_open")
        unregister("tmp_reasoned")


def test_stopwords_are_checked_before_any_work():
    """bm25's stopwords are checked before a sweep starts, not when every config fails later."""
    [problem] = param_problems("bm25", {"stopwords": "english"})
    assert problem == ("strategy bm25: param stopwords='english' is not valid; stopwords takes one of 'lucene', "
                       "'nltk', True, False, or a list of strings, or null (default 'lucene')")
    assert param_problems("bm25", {"stopwords": 3}) and param_problems("bm25", {"stopwords": ["the", 1]})
    for ok in ("nltk", None, False, True, ["the", "a"]):
        assert param_problems("bm25", {"stopwords": ok}) == [], ok


def test_the_sweep_check_refuses_a_bad_stopwords_list(tmp_path):
    from lab.workbench.config import expand, load_spec
    from lab.workbench.sweep_check import validate_sweep

    path = tmp_path / "s.yaml"
    path.write_text(f"notebook: notebooks/03_strategy_comparison.ipynb\ndataset: {ROOT / 'data' / 'ord-qa'}\n"
                    "experiment: s\nfixed:\n  strategy: bm25\n  params: {stopwords: english}\n", encoding="utf-8")
    spec = load_spec(path)
    [line] = validate_sweep(spec, expand(spec))
    assert "stopwords='english' is not valid" in line and "one of 'lucene', 'nltk'" in line


@pytest.mark.parametrize(("strategy", "cls", "params", "says"), [
    ("bm25", "bm25.BM25Retriever", {"k1": -1}, "k1 takes a number >= 0"),
    ("bm25", "bm25.BM25Retriever", {"backend": "lucene"}, "backend takes one of 'bm25s', 'bm25s-eager', 'rank_bm25'"),
    ("dense", "dense.DenseRetriever", {"index": "ivf"}, "index takes one of"),
    ("raptor", "raptor.RaptorRetriever", {"cluster_size": 1}, "cluster_size takes an integer >= 2"),
    ("kg", "kg.KGRetriever", {"alpha": 1.0}, "alpha takes a number > 0 and < 1"),
    ("kg", "kg.KGRetriever", {"weights": [1.0]}, "weights takes a list of 2 numbers"),
    ("hybrid", "fusion.HybridRetriever", {"fusion": "max"}, "fusion takes one of 'rrf'"),
    ("qna", "qna.QnARetriever", {"n_questions": 0}, "n_questions takes an integer >= 1"),
    ("parent", "parent.ParentRetriever", {"mode": "up"}, "mode takes one of"),
])
def test_declared_rules_hold_for_build_and_for_direct_construction(strategy, cls, params, says):
    """Declared once (register's rules): build checks them, and so does the class constructed directly, before
    its __init__ (which no longer repeats them)."""
    with pytest.raises(ConfigError, match=says):
        build(strategy, params)
    module, name = cls.split(".")
    klass = getattr(importlib.import_module(f"lab.retrievers.{module}"), name)
    with pytest.raises(ConfigError, match=says):
        klass(None, **params)


def test_cross_param_checks_stay_in_init():
    with pytest.raises(ConfigError, match="rank_bm25' has no BM25L"):
        build("bm25", {"backend": "rank_bm25", "variant": "bm25l"})


def test_every_strategy_object_has_the_whole_contract():
    r = build("bm25", {})
    assert isinstance(r, Retriever) and isinstance(r, BaseRetriever)
    r.index(CORPUS)
    assert r.search_batch(QUERIES, 2).scores == r.search(QUERIES, 2).scores
    assert r.usage() == {} and r.describe()["strategy"] == "bm25"
    r.use_qrels(None)  # ignored by default


def test_the_default_search_batch_is_search():
    class Echo(BaseRetriever):
        name = "echo"

        def index(self, corpus):
            self.ids = sorted(corpus.docs)

        def search_one(self, text, k):
            return [(d, 1.0 / (i + 1)) for i, d in enumerate(self.ids[:k])]

    e = Echo()
    e.index(CORPUS)
    assert e.search_batch(QUERIES, 2).scores == e.search(QUERIES, 2).scores == {
        "q1": {"a": 1.0, "b": 0.5}, "q2": {"a": 1.0, "b": 0.5}}
    assert e.describe() == {"strategy": "echo"} and e.usage() == {}


def test_http_is_a_base_retriever():
    from lab.retrievers.http import HttpRetriever

    assert issubclass(HttpRetriever, BaseRetriever)
    r = build("http", {"url": "http://127.0.0.1:9/retrieve"})
    assert isinstance(r, Retriever) and r.usage() == {}


def test_build_refuses_an_object_without_the_contract():
    class Bare:
        name = "bare"

        def index(self, corpus):
            pass

        def search(self, queries, k=100):
            raise AssertionError("never searched here")

    try:
        register("tmp_bare")(lambda ctx, **params: Bare())
        with pytest.raises(TypeError, match="without search_one, search_batch, use_qrels, describe, usage; derive"):
            build("tmp_bare")
    finally:
        unregister("tmp_bare")


def test_extra_keys_is_one_type():
    def check(extra, params, where):
        return []

    assert ExtraKeys.of(None) == ExtraKeys()
    assert ExtraKeys.of(True).unchecked
    assert ExtraKeys.of("dense").strategy == "dense"
    assert ExtraKeys.of(check).check is check
    assert declared_params("hyde").extra == ExtraKeys(strategy="dense")
    assert declared_params("hybrid").extra.check is not None
    with pytest.raises(TypeError, match="extra=3"):
        ExtraKeys.of(3)
