"""lab.workbench.config: spec validation (errors name file and key), expansion; lab.core.flat: flattening, hashing."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.core.flat import config_hash, flatten, nan_to_none, set_dotted, unflatten, varying_keys
from lab.workbench.config import expand, label, load_spec, parse_spec

NOTEBOOK = Path(__file__).parents[1] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def spec_text(extra: str = "") -> str:
    return f"notebook: {NOTEBOOK}\ndataset: data/ord-qa\nexperiment: exp\n{extra}"


def test_expand_grid_zip_fixed_order_and_nesting(tmp_path):
    spec = load_spec(write(tmp_path, spec_text(
        "seed: 3\n"
        "fixed: {strategy: bm25, params: {b: 0.4}, k: 10}\n"
        "grid:\n  params.k1: [0.9, 1.2]\n  chunking.size: [128, 256, 512]\n"
        "zip:\n  chunking.overlap: [0, 32]\n  chunking.chunker: [fixed, recursive]\n")))
    configs = expand(spec)
    assert len(configs) == 2 * 2 * 3
    # zip rows outer, grid inner, last grid key fastest
    assert [(c["chunking"]["chunker"], c["params"]["k1"], c["chunking"]["size"]) for c in configs[:4]] == [
        ("fixed", 0.9, 128), ("fixed", 0.9, 256), ("fixed", 0.9, 512), ("fixed", 1.2, 128)]
    assert configs[-1] == {"dataset": "data/ord-qa", "seed": 3, "strategy": "bm25", "k": 10,
                           "params": {"b": 0.4, "k1": 1.2},
                           "chunking": {"overlap": 32, "chunker": "recursive", "size": 512}}
    # zip is row by row: overlap 0 always goes with chunker fixed
    assert {(c["chunking"]["overlap"], c["chunking"]["chunker"]) for c in configs} == {(0, "fixed"), (32, "recursive")}
    # configs do not share mutable parts
    configs[0]["params"]["b"] = 99
    assert configs[1]["params"]["b"] == 0.4
    assert len({config_hash(c) for c in configs}) == len(configs)


def test_no_grid_gives_one_config_and_relative_notebook(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "nb.ipynb").write_text("{}")
    (tmp_path / "params").mkdir()
    p = write(tmp_path / "params", "notebook: notebooks/nb.ipynb\ndataset: d\nfixed: {strategy: bm25}\n")
    spec = load_spec(p, root=tmp_path)
    assert spec.notebook == (tmp_path / "notebooks" / "nb.ipynb").resolve()
    assert spec.name == "spec" and spec.experiment == "spec"  # defaults: the file stem
    assert expand(spec) == [{"dataset": "d", "strategy": "bm25"}]


@pytest.mark.parametrize("extra, key, words", [
    ("grids: {k: [1]}\n", "grids", "unknown top-level key"),
    ("grid: {params.k1: []}\n", "grid.params.k1", "empty list"),
    ("grid: {params.k1: 0.9}\n", "grid.params.k1", "must be a list"),
    ("zip: {a: [1, 2], b: [1, 2, 3]}\n", "zip.b", "has 3 values but zip.a has 2"),
    ("fixed: {params: {k1: 1}}\ngrid: {params.k1: [1, 2]}\n", "params.k1", "set in both fixed"),
    ("grid: {dataset: [a, b]}\n", "dataset", "set in both top level"),
    ("fixed: {mlflow_run_id: x}\n", "fixed.mlflow_run_id", "set by the sweep"),
    ("seed: abc\n", "seed", "must be an integer"),
])
def test_validation_errors_name_file_and_key(tmp_path, extra, key, words):
    p = write(tmp_path, spec_text(extra))
    with pytest.raises(ConfigError) as err:
        load_spec(p)
    msg = str(err.value)
    assert str(p) in msg and f"key '{key}'" in msg and words in msg


def test_missing_notebook_and_dataset(tmp_path):
    p = write(tmp_path, "notebook: notebooks/nope.ipynb\ndataset: d\n")
    with pytest.raises(ConfigError, match=r"key 'notebook': 'notebooks/nope.ipynb' not found"):
        load_spec(p, root=tmp_path)
    p = write(tmp_path, f"notebook: {NOTEBOOK}\nfixed: {{k: 1}}\n")
    with pytest.raises(ConfigError, match=r"key 'dataset': missing"):
        load_spec(p)
    # dataset may come from the grid instead
    p = write(tmp_path, f"notebook: {NOTEBOOK}\ngrid: {{dataset: [a, b]}}\n")
    assert [c["dataset"] for c in expand(load_spec(p))] == ["a", "b"]
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_spec(write(tmp_path, "notebook: [unclosed\n"))
    with pytest.raises(ConfigError, match="no such sweep spec"):
        load_spec(tmp_path / "absent.yaml")


def test_flatten_format_and_roundtrip():
    config = {"dataset": "data/x", "k": 10, "params": {"k1": 1.2, "use": True, "model": None,
                                                        "retrievers": ["bm25", "dense"]},
              "chunking": {}, "name": "ü"}
    flat = flatten(config)
    assert flat == {"dataset": "data/x", "k": "10", "params.k1": "1.2", "params.use": "true", "params.model": "null",
                    "params.retrievers": '["bm25","dense"]', "chunking": "{}", "name": "ü"}
    assert all(isinstance(v, str) for v in flat.values())
    assert unflatten({"a.b": 1, "a.c": 2, "d": 3}) == {"a": {"b": 1, "c": 2}, "d": 3}


def test_nan_to_none_writes_unmeasured_figures_as_json_null():
    row = {"ndcg@10": 0.5, "latency_p50_ms": float("nan"), "n": 3, "tag": "nan", "none": None}
    assert json.dumps({k: nan_to_none(v) for k, v in row.items()}) == \
        '{"ndcg@10": 0.5, "latency_p50_ms": null, "n": 3, "tag": "nan", "none": null}'


def test_config_hash_is_sha256_of_canonical_json():
    a = {"params": {"k1": 0.9, "b": 0.4}, "dataset": "d"}
    b = {"dataset": "d", "params": {"b": 0.4, "k1": 0.9}}  # other key order, same config
    canon = '{"dataset":"d","params":{"b":0.4,"k1":0.9}}'
    assert config_hash(a) == config_hash(b) == hashlib.sha256(canon.encode()).hexdigest()[:16]
    assert json.dumps(b, sort_keys=True, separators=(",", ":")) == canon
    assert config_hash({**a, "k": 10}) != config_hash(a)
    assert config_hash({"k": 1}) != config_hash({"k": 1.0})  # YAML 1 and 1.0 differ for the notebook too
    assert config_hash({"k": 1}) != config_hash({"k": "1"})


def test_set_dotted_merges_and_refuses_scalars():
    c = set_dotted({"params": {"b": 1}}, "params.k1", 2)
    assert c == {"params": {"b": 1, "k1": 2}}
    set_dotted(c, "params", {"c": 3})  # a dict merges
    assert c == {"params": {"b": 1, "k1": 2, "c": 3}}
    with pytest.raises(ConfigError, match="not a mapping"):
        set_dotted({"k": 1}, "k.x", 2)


def test_varying_keys_and_labels():
    configs = [{"strategy": "bm25", "params": {"k1": k1}, "k": 10} for k1 in (0.9, 1.2)]
    keys = varying_keys(configs)
    assert keys == ["params.k1"]
    assert [label(c, keys) for c in configs] == ["params.k1=0.9", "params.k1=1.2"]
    assert varying_keys(configs[:1]) == []


def test_parse_spec_rejects_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="expected a mapping"):
        parse_spec(["a"], tmp_path / "x.yaml")


@pytest.mark.parametrize("text, line", [
    ("notebook: nb.ipynb\ngrid:\n  dataset: [data/scifact, data/ord-qa\nfixed:\n  k: 10\n", 3),  # was 4
    ("notebook: nb.ipynb\nfixed:\n  name: \"abc\n  k: 1\n", 3),  # unclosed quote: was 5
    ("notebook: nb.ipynb\ngrid:\n  dataset: [a]\n   k: 10\n", 4),  # bad indentation: where it is
    ("notebook: nb.ipynb\nfixed:\n  name: a: b\n", 3)])
def test_yaml_syntax_errors_name_the_line_they_are_on(tmp_path, text, line):
    with pytest.raises(ConfigError, match=rf"spec.yaml, line {line}: not valid YAML"):
        load_spec(write(tmp_path, text))
