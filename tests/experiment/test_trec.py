"""`lab run --from-trec`: a TREC run made elsewhere is evaluated, logged and compared like our own strategies.

The "outside" run is BM25's own run over ORD-QA written to TREC by `lab run --out`, so the imported metrics must
equal BM25's exactly; its edits (dropped queries, foreign ids, extra queries) check the bookkeeping.
"""
from __future__ import annotations

import json
import math

import pytest
from conftest import blank_store

from lab.cli.main import main
from lab.core.errors import DataError
from lab.core.paths import resolve_repo_path
from lab.experiment.trec import trec_result

DATASET = str(resolve_repo_path("data/ord-qa"))


@pytest.fixture(scope="module")
def bm25_run(tmp_path_factory):
    """(path of BM25's TREC run on ORD-QA test, its `lab run --json` output)."""
    import contextlib
    import io

    path = tmp_path_factory.mktemp("trec") / "bm25.run.trec"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["run", "--dataset", DATASET, "--strategy", "bm25", "--out", str(path), "--json"]) == 0
    return path, json.loads(buf.getvalue())


def metric_keys(out: dict) -> list[str]:
    return [k for k in out if "@" in k]


def test_imported_run_scores_exactly_like_the_strategy_that_made_it(bm25_run, capsys):
    path, direct = bm25_run
    assert main(["run", "--dataset", DATASET, "--from-trec", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {m: out[m] for m in metric_keys(direct)} == {m: direct[m] for m in metric_keys(direct)}
    assert out["latency_p50_ms"] is None and out["index_seconds"] is None  # measured elsewhere: not made up
    meta = out["_meta"]
    assert meta["config"]["strategy"] == "trec:bm25" and meta["n_queries"] == 90
    assert meta["dataset_fingerprint"] == direct["_meta"]["dataset_fingerprint"]
    assert meta["retriever"]["run_tag"] == "bm25" and len(meta["retriever"]["run_sha256"]) == 64
    assert meta["retriever"]["unknown_ids"] == 0 and meta["retriever"]["run_queries_outside_split"] == 0


def test_bookkeeping_of_an_edited_run(bm25_run, tmp_path):
    path, _ = bm25_run
    lines = path.read_text().splitlines()
    dropped = lines[0].split()[0]  # the first query loses all its hits
    kept = [ln for ln in lines if ln.split()[0] != dropped]
    qid = kept[0].split()[0]
    kept.append(f"{qid} Q0 not-a-doc 999 -5.0 bm25")  # an id the corpus does not know
    kept.append("no-such-query Q0 install_0 1 1.0 bm25")  # a query outside the split
    edited = tmp_path / "edited.trec"
    edited.write_text("\n".join(kept) + "\n")
    res = trec_result(DATASET, edited, name="vendor", progress=False)
    d = res.info["retriever"]
    assert res.config["strategy"] == "vendor" and res.evaluation.n_queries == 90  # the dropped query still counts
    assert d["split_queries_without_hits"] == 1 and d["run_queries_outside_split"] == 1
    assert d["unknown_ids"] == 1 and d["unknown_examples"] == "not-a-doc"
    assert (res.evaluation.per_query.loc[dropped] == 0).all()
    assert math.isnan(res.latency["latency_p50_ms"]) and math.isnan(res.index_seconds)

    cut = trec_result(DATASET, edited, k=5, max_queries=10, progress=False)
    assert cut.evaluation.n_queries == 10 and max(len(h) for h in cut.run.scores.values()) == 5


@pytest.mark.parametrize("text, where", [
    ("1 Q0 install_0 1 1.0 t\n1 Q0 install_1 2 high t\n", "line 2, field 'score'"),
    ("1 Q0 install_0 first 1.0 t\n", "line 1, field 'rank'"),
    ("1 Q0 install_0 1 1.0\n", "line 1"),
    ("999 Q0 install_0 1 1.0 t\n", "field 'qid': none of its 1 queries"),
])
def test_bad_files_name_file_line_and_field(tmp_path, capsys, text, where):
    bad = tmp_path / "bad.trec"
    bad.write_text(text)
    with pytest.raises(DataError, match=where):
        trec_result(DATASET, bad, progress=False)
    assert main(["run", "--dataset", DATASET, "--from-trec", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}") and where in err


def test_strategy_and_from_trec_exclude_each_other(bm25_run, capsys):
    path, _ = bm25_run
    assert main(["run", "--dataset", DATASET, "--strategy", "bm25", "--from-trec", str(path)]) == 2
    assert main(["run", "--dataset", DATASET]) == 2
    assert main(["run", "--dataset", DATASET, "--from-trec", str(path), "--set", "k1=2"]) == 2
    assert "--from-trec" in capsys.readouterr().err


def test_imported_run_is_logged_and_compared_beside_bm25(bm25_run, tmp_path, pytestconfig, capsys):
    from lab.analysis.compare import experiment_leaderboard
    from lab.tracking.store import client

    path, _ = bm25_run
    root = str(blank_store(tmp_path, pytestconfig))
    assert main(["run", "--dataset", DATASET, "--strategy", "bm25", "--experiment", "ext", "--root", root,
                 "--no-progress"]) == 0
    assert main(["run", "--dataset", DATASET, "--from-trec", str(path), "--name", "vendor-bm25",
                 "--experiment", "ext", "--root", root]) == 0
    assert "logged to MLflow experiment 'ext'" in capsys.readouterr().out
    df = experiment_leaderboard("ext", tracking_root=root, n_resamples=200)
    assert sorted(df["strategy"]) == ["bm25", "vendor-bm25"]
    assert df["ndcg@10"].iloc[0] == df["ndcg@10"].iloc[1] and df["diff"].iloc[1] == 0
    assert not df.attrs["warnings"]
    cl = client(root)
    runs = {r.data.tags["strategy"]: r for r in cl.search_runs([cl.get_experiment_by_name("ext").experiment_id])}
    assert runs["vendor-bm25"].data.tags["dataset_fingerprint"] == runs["bm25"].data.tags["dataset_fingerprint"]
    assert runs["vendor-bm25"].data.params["retriever.source"] == "trec"
    assert "latency_p50_ms" not in runs["vendor-bm25"].data.metrics  # not measured, not logged as 0

    assert main(["compare", "--experiment", "ext", "--root", root]) == 0
    table = capsys.readouterr().out
    rows = [line.split() for line in table.splitlines()]
    assert any("bm25" in r for r in rows) and any("vendor-bm25" in r for r in rows), table  # short labels
