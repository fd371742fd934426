"""lab.workbench.halving: rung sizes, the halving itself on a known grid, and a real tiny sweep spec on ORD-QA with
BM25."""
from __future__ import annotations

import json

import pytest

from lab.core.errors import ConfigError
from lab.core.paths import repo_root
from lab.workbench.halving import query_order, run_halving_sweep, rung_sizes, successive_halving


def test_rung_sizes():
    assert rung_sizes(300, 20, eta=2, min_queries=20) == [20, 37, 75, 150, 300]
    assert rung_sizes(90, 4, eta=2, min_queries=20) == [22, 45, 90]
    assert rung_sizes(90, 4, eta=2, min_queries=60) == [60, 90]  # equal early rungs collapse
    assert rung_sizes(50, 1) == [50]
    with pytest.raises(ConfigError, match="eta must be an integer >= 2"):
        rung_sizes(100, 4, eta=1)


def test_query_order_is_seeded_and_nested():
    ids = [f"q{i}" for i in range(50)]
    assert query_order(ids, 0) == query_order(list(reversed(ids)), 0)
    assert query_order(ids, 0) != query_order(ids, 1)
    assert sorted(query_order(ids, 3)) == sorted(ids)


def test_halving_keeps_the_best_and_counts_work():
    # config c scores c/10 plus a per-query term that misleads on small slices for config 6 only
    truth = [c / 10 for c in range(8)]
    seen: list[tuple[int, int]] = []

    def score(c, qids):
        seen.append((c, len(qids)))
        return truth[c] + (0.5 if c == 6 and len(qids) < 20 else 0)

    rep = successive_halving(8, score, [f"q{i}" for i in range(80)], eta=2, min_queries=10)
    assert [r.n_queries for r in rep.rungs] == [10, 20, 40, 80]
    assert [len(r.configs) for r in rep.rungs] == [8, 4, 2, 1]
    assert rep.rungs[0].kept[0] == 6  # misled on the first slice, dropped once the slice grew
    assert rep.winner == 7
    assert rep.evaluations == 8 * 10 + 4 * 20 + 2 * 40 + 1 * 80 == sum(n for _, n in seen)
    assert rep.full_grid_evaluations == 640 and rep.saved == pytest.approx(1 - 320 / 640)


def _k1_spec(path, experiment: str, k1s: str):
    """A BM25 k1 grid over ORD-QA's test queries, written to ``path``."""
    root = repo_root()
    path.write_text(f"notebook: {root / 'notebooks/03_strategy_comparison.ipynb'}\n"
                    f"dataset: {root / 'data/ord-qa'}\nexperiment: {experiment}\nseed: 0\n"
                    "fixed:\n  split: test\n  k: 100\n  strategy: bm25\n"
                    f"grid:\n  params.k1: [{k1s}]\n")
    return path


def test_halving_on_a_real_spec(tmp_path, monkeypatch):
    spec = _k1_spec(tmp_path / "k1_grid.yaml", "halving_test", "0.0, 0.9, 1.5, 3.0")
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    out = run_halving_sweep(spec, metric="ndcg@10", eta=2, min_queries=20, compare_full=True, echo=None)
    assert [r["n_queries"] for r in out["rungs"]] == [22, 45, 90]
    assert out["evaluations"] == 4 * 22 + 2 * 45 + 90 < out["full_grid_evaluations"] == 4 * 90
    assert out["indexes_built"] == 4  # each config indexed once, kept across its rungs
    full = out["full_scores"]
    assert len(full) == 4 and out["full_winner"] == max(range(4), key=full.__getitem__)  # the full grid's best
    # on this grid halving keeps k1 1.5 (config 2) while the full grid's best is k1 3.0 (config 3): the report says
    # the winners differ and by how much
    assert (out["winner"], out["full_winner"], out["winner_matches"]) == (2, 3, False)
    assert out["winner_gap"] == pytest.approx(full[3] - full[2]) and out["winner_gap"] > 0
    # the last rung scores its config on every query: the same number as the full grid's
    assert out["rungs"][-1]["scores"][0] == pytest.approx(out["full_scores"][out["winner"]])
    lo, hi = out["full_best_ci"]  # the full grid's best, with its bootstrap CI; the winner's score tested in it
    assert lo <= out["full_scores"][out["full_winner"]] <= hi
    assert out["winner_within_full_ci"] == (lo <= out["full_scores"][out["winner"]] <= hi)
    assert out["warmup_seconds"] > 0 and out["halving_seconds"] > 0 and out["full_seconds"] > 0
    json.dumps(out)


def test_cli_halving_bad_eta(capsys):
    from lab.cli.main import main

    assert main(["sweep", "params/chunk_size_grid.yaml", "--halving", "--eta", "1"]) == 2
    assert "--eta 1: must be an integer >= 2" in capsys.readouterr().err


def test_halving_logs_its_outcome_and_the_winner_to_mlflow(tmp_path, monkeypatch):
    from lab.tracking.store import TAG_PARENT, TAG_ROLE, client

    spec = _k1_spec(tmp_path / "k1_pair.yaml", "halving_logged", "0.0, 1.2")
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "mlruns"
    out = run_halving_sweep(spec, metric="ndcg@10", eta=2, min_queries=20, echo=None, tracking_root=str(store))
    cl = client(str(store))
    parent, child = cl.get_run(out["parent_run_id"]), cl.get_run(out["winner_run_id"])
    assert parent.data.tags[TAG_ROLE] == "halving" and parent.info.status == "FINISHED"
    assert parent.data.params["winner"] == out["winner_label"] and parent.data.params["eta"] == "2"
    assert parent.data.metrics["evaluations"] == out["evaluations"] == 2 * 45 + 90
    assert parent.data.metrics["indexes_built"] == 2
    assert child.data.tags[TAG_PARENT] == parent.info.run_id and child.info.status == "FINISHED"
    # the child is the winner's evaluation on every query: the last rung's score, with CIs and the usual tags
    assert child.data.metrics["ndcg_at_10"] == pytest.approx(out["rungs"][-1]["scores"][0])
    assert child.data.params["params.k1"] == str(1.2 if out["winner"] == 1 else 0.0)
    assert "dataset_fingerprint" in child.data.tags
    names = {a.path for a in cl.list_artifacts(parent.info.run_id)}
    assert "halving.json" in names


def test_halving_checks_the_spec_as_lab_sweep_does(tmp_path):
    """A misspelt key stops halving before any work, with the line and the key, as `lab sweep` says it."""
    from lab.cli.main import main

    root = repo_root()
    spec = tmp_path / "bad.yaml"
    spec.write_text(f"notebook: {root / 'notebooks/03_strategy_comparison.ipynb'}\n"
                    f"dataset: {root / 'data/ord-qa'}\nfixed: {{split: test, stratgy: bm25}}\n")
    with pytest.raises(ConfigError, match=r"line 3, key 'fixed.stratgy'.*not a parameter of the notebook"):
        run_halving_sweep(spec, echo=None)
    assert main(["sweep", str(spec), "--halving"]) == 2
