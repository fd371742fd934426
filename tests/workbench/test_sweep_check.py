"""lab.workbench.sweep_check: every config of a sweep is checked before the first execution."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.workbench.config import expand, load_spec
from lab.workbench.sweep import run_sweep
from lab.workbench.sweep_check import key_lines, notebook_parameters, validate_sweep

ROOT = Path(__file__).resolve().parents[2]

BAD = """\
notebook: notebooks/03_strategy_comparison.ipynb
dataset: {dataset}
experiment: bad
fixed:
  split: test
  k: "abc"
  max_querys: 10
grid:
  strategy: [bm25, nosuch, hybrid]
zip:
  params: [{{k1x: 1}}]
"""


def _spec(tmp_path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_every_problem_is_one_line_naming_file_line_and_config(tmp_path):
    path = _spec(tmp_path, BAD.format(dataset=ROOT / "data" / "ord-qa"))
    spec = load_spec(path)
    problems = validate_sweep(spec, expand(spec), ["strategy=bm25", "strategy=nosuch", "strategy=hybrid"])
    text = "\n".join(problems)
    assert len(problems) == 5, text
    assert f"{path}, line 7, key 'fixed.max_querys': all 3 configs: key 'max_querys' is not a parameter" in text
    assert "it takes: chunking, condensed, dataset, human_qrels, k, max_queries" in text
    assert f"{path}, line 6, key 'fixed.k': all 3 configs: k='abc': expected an integer >= 1" in text
    assert "line 9, key 'grid.strategy': config 1 (strategy=nosuch): strategy nosuch: unknown strategy" in text
    assert "line 11, key 'zip.params': config 0 (strategy=bm25): strategy bm25: unknown param 'k1x'" in text
    assert "config 2 (strategy=hybrid): strategy hybrid: unknown param 'k1x'" in text


def test_missing_dataset_and_split(tmp_path):
    path = _spec(tmp_path, "notebook: notebooks/03_strategy_comparison.ipynb\ndataset: data/nosuch\nexperiment: b\n"
                           "fixed: {strategy: bm25}\n")
    spec = load_spec(path)
    [line] = validate_sweep(spec, expand(spec))
    assert "line 2, key 'dataset'" in line and "dataset 'data/nosuch': dataset folder not found" in line
    path = _spec(tmp_path, "notebook: notebooks/03_strategy_comparison.ipynb\ndataset: data/ord-qa\nexperiment: b\n"
                           "fixed: {strategy: bm25, split: dev}\n", "split.yaml")
    spec = load_spec(path)
    [line] = validate_sweep(spec, expand(spec))
    assert "split 'dev': dataset 'data/ord-qa' has qrels for test" in line


def test_bad_sweep_does_not_start_dry_run_or_real(tmp_path):
    path = _spec(tmp_path, BAD.format(dataset=ROOT / "data" / "ord-qa"))
    root = tmp_path / "mlruns"
    for dry in (True, False):
        with pytest.raises(ConfigError) as exc:
            run_sweep(path, dry_run=dry, tracking_root=root, output_dir=tmp_path / "out", progress=False, echo=None)
        lines = str(exc.value).splitlines()
        assert len(lines) == 6 and lines[-1].startswith("sweep 'bad' not started: 5 problem(s)")
    assert not (tmp_path / "out").exists()  # nothing executed, no notebook written
    assert not root.exists() or not (root / "mlflow.db").exists()  # no run logged: the store was never opened


def test_cli_prints_one_error_line_per_problem(tmp_path, capsys):
    from lab.cli.main import main

    path = _spec(tmp_path, BAD.format(dataset=ROOT / "data" / "ord-qa"))
    rc = main(["sweep", str(path), "--dry-run", "--tracking-root", str(tmp_path / "mlruns")])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 6 and all(line.startswith("error: ") for line in err)


@pytest.mark.parametrize("spec_file", sorted((ROOT / "params").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_specs_are_valid(spec_file):
    spec = load_spec(spec_file)
    assert validate_sweep(spec, expand(spec)) == []


def test_helpers():
    params = notebook_parameters(ROOT / "notebooks" / "03_strategy_comparison.ipynb")
    assert params["k"] == 100 and params["max_queries"] is None and params["strategies"][0] == "bm25"
    lines = key_lines(ROOT / "params" / "smoke.yaml")
    assert lines["notebook"] < lines["fixed"] < lines["fixed.k"] < lines["grid.strategy"]


def test_an_unknown_chunking_key_names_its_own_line(tmp_path):
    path = _spec(tmp_path, "notebook: notebooks/03_strategy_comparison.ipynb\ndataset: data/ord-qa\nexperiment: c\n"
                           "fixed:\n  strategy: bm25\n  chunking:\n    chunker: recursive\n    size: 256\n"
                           "    overlpa: 10\n")
    spec = load_spec(path)
    problems = validate_sweep(spec, expand(spec))
    assert len(problems) == 1 and problems[0].startswith(
        f"{path}, line 9, key 'fixed.chunking.overlpa': config 0: chunking: unknown key 'overlpa'"), problems
    assert key_lines(path)["fixed.chunking.size"] == 8
