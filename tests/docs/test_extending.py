"""docs/extending.md: the example strategy runs as written (registered, checked, searched, evaluated end to end),
and the example sweep spec passes the pre-sweep check."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.retrievers.base import build, param_problems, unregister

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extending.md"
MARK = "<!-- runs in tests/docs/test_extending.py: keep it runnable -->"


def runnable_blocks() -> list[str]:
    """The python blocks right after the marker comment, in order."""
    return re.findall(re.escape(MARK) + r"\s*```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def yaml_block() -> str:
    [block] = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return block


@pytest.fixture
def example(monkeypatch):
    """The doc's strategy registered (its first block run), unregistered afterwards."""
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(runnable_blocks()[0], f"{DOC}:strategy", "exec"), namespace)  # noqa: S102 - the doc's example
    yield namespace
    unregister("word_overlap")


def test_the_doc_has_the_two_runnable_blocks():
    assert len(runnable_blocks()) == 2


def test_the_example_strategy_is_registered_checked_and_searches(example):
    assert param_problems("word_overlap", {"min_length": 0}) == [
        "strategy word_overlap: param min_length=0 is not valid; min_length takes an integer >= 1 (default 3)"]
    with pytest.raises(ConfigError, match="case takes one of 'fold', 'keep'"):
        example["WordOverlapRetriever"](case="upper")
    from lab.data.types import Corpus, Document, Queries

    r = build("word_overlap", {"min_length": 3})
    r.index(Corpus({d.id: d for d in (Document("a", "graph partition"), Document("b", "Graph placement flow"),
                                      Document("c", "routing"))}))
    run = r.search(Queries({"q": "placement of a graph"}), 5)
    assert run.ranked("q") == [("b", 2.0), ("a", 1.0)] and set(run.latency) == {"q"}
    assert r.describe() == {"strategy": "word_overlap", "min_length": 3, "case": "fold"}


def test_the_example_runs_an_experiment_as_written(example, capsys):
    exec(compile(runnable_blocks()[1], f"{DOC}:usage", "exec"), {})  # noqa: S102 - the doc's example
    out = capsys.readouterr().out
    match = re.search(r"nDCG@10 (\d\.\d{3}) over 20 queries", out)
    assert match, out
    assert 0.0 < float(match.group(1)) <= 1.0


def test_the_example_sweep_spec_passes_the_pre_sweep_check(example, tmp_path):
    from lab.workbench.config import expand, load_spec
    from lab.workbench.sweep_check import validate_sweep

    path = tmp_path / "overlap.yaml"
    path.write_text(yaml_block().replace("data/ord-qa", str(ROOT / "data" / "ord-qa")), encoding="utf-8")
    spec = load_spec(path)
    configs = expand(spec)
    assert [c["params"]["min_length"] for c in configs] == [3, 4, 5]
    assert validate_sweep(spec, configs) == []
