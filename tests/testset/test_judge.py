"""lab.testset.judge: pooled judgements by the packaged SmolLM2-135M on a tiny ord-qa pool (real generation,
a few seconds), labels added with provenance, the trust report, a cheap cached rerun and the CLI's errors."""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
from ordqa_slices import mini_ordqa

from lab.cli.main import main
from lab.data.beir import load_dataset
from lab.testset.judge import JudgeConfig, judge_dataset
from lab.testset.judged_set import format_report, sidecar_path
from lab.testset.umbrela import PROMPT_VERSION, prompt_sha256

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    base = tmp_path_factory.mktemp("judge")
    ds_dir = mini_ordqa(base / "mini", n_queries=2, n_other=6)
    cfg = JudgeConfig(strategies=["bm25"], depth=2, grammar="always", max_passage_chars=500, check_pairs=1)
    meta = judge_dataset(ds_dir, out=base / "judged", config=cfg, cache_dir=base / "cache", progress=False,
                         tracking_root=None, force=True)  # the 135M judge is below any floor: --force
    return base, ds_dir, meta


def test_labels_added_with_provenance(judged):
    base, ds_dir, meta = judged
    r = meta["report"]
    assert r["pool_pairs"] == 4 and r["queries"] == 2  # 2 queries x depth 2, one strategy
    assert r["graded"] + r["ungraded"] == r["pool_pairs"]
    assert r["parse_failures"] == r["ungraded"]  # grammar "always": one call per pair
    assert meta["judge"].startswith("gguf:SmolLM2-135M-Instruct") and meta["prompt_version"] == PROMPT_VERSION
    assert meta["prompt_sha256"] == prompt_sha256()
    old = load_dataset(ds_dir, progress=False).qrels["test"].qrels
    new = load_dataset(base / "judged", progress=False).qrels["test"].qrels  # every reader still reads the tsv
    n_old = sum(map(len, old.values()))
    assert sum(map(len, new.values())) == n_old + r["labels_added"]
    for q, docs in old.items():
        assert all(new[q][d] == g for d, g in docs.items())  # existing labels are kept as they were
    side = [json.loads(x) for x in sidecar_path(base / "judged", "test").read_text(encoding="utf-8").splitlines()]
    assert len(side) == n_old + r["labels_added"]
    assert {s["source"] for s in side} <= {"human", "judged"}
    assert sum(s["source"] == "judged" for s in side) == r["labels_added"]
    for s in side:
        assert new[s["query_id"]][s["doc_id"]] == s["grade"]
        if s["source"] == "judged":
            assert s["judge_grade"] == s["grade"] and s["prompt_version"] == PROMPT_VERSION
    assert (base / "judged" / "judge_report.json").is_file()
    assert "labels added" in format_report(meta)


def test_trust_report_and_score_changes(judged):
    _, _, meta = judged
    r = meta["report"]
    assert r["known_positives_graded"] <= r["known_positives_in_pool"]
    if r["known_positives_graded"]:
        assert 0.0 <= r["recall_known_positives"] <= 1.0
    row = r["strategies"]["bm25"]
    # grammar "always": every pooled pair gets a grade, so after judging all of bm25's top 2 is judged, and the
    # condensed list (judged documents only) is the whole list
    assert r["ungraded"] == 0 and r["graded"] == r["pool_pairs"]
    assert row["judged@2_before"] < row["judged@2_after"] == pytest.approx(1.0)
    assert row["ndcg@2_after_condensed"] == pytest.approx(row["ndcg@2_after"])
    assert row["judged@2_after_condensed"] == pytest.approx(1.0)


def test_rerun_is_answered_from_the_cache_and_in_place_keeps_sources(judged, tmp_path):
    base, _, meta = judged
    import shutil

    shutil.copytree(base / "judged", tmp_path / "set")
    again = judge_dataset(tmp_path / "set", in_place=True, config=JudgeConfig(strategies=["bm25"], depth=2,
                                                                               grammar="always",
                                                                               max_passage_chars=500, check_pairs=1),
                          cache_dir=base / "cache", progress=False, tracking_root=None, force=True)
    assert again["llm_usage"]["generated"] == 0 and again["llm_usage"]["cache_hits"] == meta["report"]["pool_pairs"]
    assert again["report"]["labels_added"] == 0
    # labels judged by the first run are not counted as known positives of the second
    assert again["report"]["known_positives_graded"] == meta["report"]["known_positives_graded"]
    side = [json.loads(x) for x in sidecar_path(tmp_path / "set", "test").read_text(encoding="utf-8").splitlines()]
    assert sum(s["source"] == "judged" for s in side) == meta["report"]["labels_added"]


def test_cli_judge_with_annotation_sheet_logs_to_mlflow(judged, tmp_path, capsys, blank_tracking_root):
    base, ds_dir, meta = judged
    side = [json.loads(x) for x in sidecar_path(base / "judged", "test").read_text(encoding="utf-8").splitlines()]
    sheet = tmp_path / "sheet.csv"
    with open(sheet, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["qid", "query", "unit_id", "passage", "grade", "tier", "note"])
        for s in side:
            w.writerow([s["query_id"], "", s["doc_id"], "", s["grade"], "", ""])
    rc = main(["testset", "judge", "--dataset", str(ds_dir), "--strategies", "bm25", "--depth", "2", "--out",
               str(tmp_path / "out"), "--grammar", "always", "--max-passage-chars", "500", "--check-pairs", "1",
               "--force", "--annotation",
               str(sheet), "--cache-dir",
               str(base / "cache"), "--tracking-root", str(blank_tracking_root), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    from lab.tracking.store import client

    run = client(blank_tracking_root).get_run(out["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["testset.kind"] == "judge"
    assert run.data.params["prompt_version"] == PROMPT_VERSION and run.data.params["prompt_sha256"] == prompt_sha256()
    assert run.data.params["judge"].startswith("gguf:SmolLM2") and "labels_added" in run.data.metrics
    assert "bm25.judged_at_2_after" in run.data.metrics
    agree = out["report"]["human_agreement"]
    # the sheet's grades are the labels the first run kept; the judge's grade of each pooled pair is in the sidecar
    both = [(s["grade"], s["judge_grade"]) for s in side if s.get("judge_grade") is not None]
    assert agree["pairs"] == len(both) >= 1
    assert agree["exact_agreement"] == pytest.approx(sum(h == j for h, j in both) / len(both))
    observed = sum(h == j for h, j in both) / len(both)
    chance = sum(sum(h == g for h, _ in both) * sum(j == g for _, j in both) for g in range(4)) / len(both) ** 2
    if chance < 1:  # Cohen's kappa by hand
        assert agree["kappa"] == pytest.approx((observed - chance) / (1 - chance))
    else:  # both sides gave one and the same grade: kappa is undefined
        assert agree["kappa"] is None or math.isnan(agree["kappa"])


@pytest.mark.parametrize("argv, message", [
    (["--strategies", "bm25,nope", "--out", "x"], "--strategies: unknown nope"),
    (["--depth", "0", "--out", "x"], "--depth: expected an integer >= 1, got 0"),
    (["--out", "DATASET"], "--in-place"),
    (["--out", "DATASET/qrels"], "not a judged set"),
])
def test_cli_errors_are_one_line_exit_2(judged, capsys, argv, message):
    _, ds_dir, _ = judged
    argv = [a.replace("DATASET", str(ds_dir)) for a in argv]
    try:
        rc = main(["testset", "judge", "--dataset", str(ds_dir), "--no-mlflow", *argv])
    except SystemExit as exc:  # counts are checked by argparse (lab.cli.options.positive_int)
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_needs_out_or_in_place(capsys):
    with pytest.raises(SystemExit) as e:
        main(["testset", "judge", "--dataset", "data/ord-qa"])
    assert e.value.code == 2 and "--out" in capsys.readouterr().err


def test_label_sources_from_provenance_and_sidecar(tmp_path):
    from lab.testset.judge import label_sources

    (tmp_path / "qrels").mkdir()
    qrels = {"q": {"a": 1, "b": 0}}
    assert label_sources(tmp_path, "test", qrels) == {("q", "a"): "human", ("q", "b"): "human"}
    (tmp_path / "provenance.json").write_text('{"kind": "generated"}', encoding="utf-8")
    assert set(label_sources(tmp_path, "test", qrels).values()) == {"generated"}
    sidecar_path(tmp_path, "test").write_text('{"query_id": "q", "doc_id": "b", "grade": 0, "source": "judged"}\n',
                                              encoding="utf-8")
    assert label_sources(tmp_path, "test", qrels) == {("q", "a"): "generated", ("q", "b"): "judged"}
    sidecar_path(tmp_path, "test").write_text("not json\n", encoding="utf-8")
    from lab.core.errors import DataError

    with pytest.raises(DataError, match="line 1"):
        label_sources(tmp_path, "test", qrels)


def test_unreachable_judge_is_one_line_exit_2_and_writes_nothing(judged, tmp_path, capsys, monkeypatch):
    _, ds_dir, _ = judged
    monkeypatch.setenv("LAB_LLM_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens on the discard port
    monkeypatch.setenv("LAB_LLM_API_KEY", "test-key")
    rc = main(["testset", "judge", "--dataset", str(ds_dir), "--strategies", "bm25", "--depth", "1", "--llm",
               "openai:some-model", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"),
               "--check-pairs", "0", "--no-mlflow", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "every judgement failed" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_judging_stops_after_consecutive_endpoint_failures(judged, tmp_path, capsys, monkeypatch):
    """The breaker of lab.models.breaker: N calls failed in a row stop judging with one line, exit 1 (not bad
    input), nothing written; finished grades stay in the LLM cache."""
    _, ds_dir, _ = judged
    monkeypatch.setenv("LAB_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LAB_LLM_API_KEY", "test-key")
    rc = main(["testset", "judge", "--dataset", str(ds_dir), "--strategies", "bm25", "--depth", "2", "--llm",
               "openai:some-model", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"),
               "--max-consecutive-failures", "2", "--no-mlflow", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "judging stopped after" in err and "--max-consecutive-failures 2" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_judged_set_carries_the_judge_card_in_its_provenance(judged):
    """The contract read by `lab compare`'s trust block: provenance.json "judge" = {identity, prompt_version,
    card, summary}; every rate printed with its n and interval."""
    base, _, meta = judged
    prov = json.loads((base / "judged" / "provenance.json").read_text(encoding="utf-8"))
    j = prov["judge"]
    assert j["identity"] == meta["judge"] and j["prompt_version"] == PROMPT_VERSION
    card = j["card"]
    assert card["judge"] == meta["judge"] and card["kinds"]["positive"] == 1 and card["n_pairs"] >= 2
    assert j["summary"].startswith("kappa ") and f"on {card['kappa']['n']} pairs" in j["summary"]
    assert "recall of positives" in j["summary"] and "(n=1)" in j["summary"] and "injected instruction" in j["summary"]
    assert meta["judge_card"]["summary"] == j["summary"] and meta["forced"] is True
    text = format_report(meta)
    assert "judge card" in text and j["summary"] in text
    r = meta["report"]
    if r["recall_known_positives"] is not None:  # the old "recall of the known positives 1.000" had no n, no CI
        assert f"(n={r['known_positives_graded']}, Wilson 95%)" in text


def test_judge_below_the_floor_refuses_to_merge(judged, tmp_path, capsys):
    base, ds_dir, meta = judged
    kappa = meta["judge_card"]["kappa"]["value"]
    if kappa is not None and kappa >= 1.0:
        pytest.skip("the judge agreed perfectly on the check pairs: no floor is above it")
    rc = main(["testset", "judge", "--dataset", str(ds_dir), "--strategies", "bm25", "--depth", "2", "--out",
               str(tmp_path / "out"), "--grammar", "always", "--max-passage-chars", "500", "--check-pairs", "1",
               "--min-kappa", "1.0", "--cache-dir", str(base / "cache"), "--no-mlflow", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "below the --min-kappa 1 floor" in err and meta["judge_card"]["summary"] in err, err
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_no_check_no_card(judged, tmp_path):
    base, ds_dir, _ = judged
    cfg = JudgeConfig(strategies=["bm25"], depth=2, grammar="always", max_passage_chars=500, check_pairs=0)
    meta = judge_dataset(ds_dir, out=tmp_path / "out", config=cfg, cache_dir=base / "cache", progress=False,
                         tracking_root=None)
    j = json.loads((tmp_path / "out" / "provenance.json").read_text(encoding="utf-8"))["judge"]
    assert set(j) == {"identity", "prompt_version"} and meta["judge_card"] is None
    assert "not checked" in format_report(meta)


def test_dry_run_prints_the_estimate_writes_nothing_and_the_run_reuses_its_sample(judged, tmp_path, monkeypatch):
    """--dry-run: the estimate of the card's pairs and the pool (calls, tokens, time from a timed sample) and
    nothing written; the real run then makes exactly the calls estimated, the sample's answers read from the cache."""
    from lab.models import estimate as estimate_module
    from lab.models.estimate import EstimatePolicy

    _, ds_dir, _ = judged
    cfg = JudgeConfig(strategies=["bm25"], depth=2, grammar="always", max_passage_chars=500, check_pairs=1)
    lines: list[str] = []
    dry = judge_dataset(ds_dir, out=tmp_path / "out", config=cfg, cache_dir=tmp_path / "cache", progress=False,
                        tracking_root=None, estimate=EstimatePolicy(echo=lines.append, dry_run=True))
    est = dry["estimate"]
    assert dry["dry_run"] and not (tmp_path / "out").exists()
    assert lines == [dry["estimate_line"]] and lines[0].startswith(f"estimate (judge: card and pool): {est['calls']}")
    assert est["to_make"] <= est["calls"] and est["sample"] == 3 and est["seconds"] > 0 and est["tokens"] > 0
    monkeypatch.setattr(estimate_module, "SHOW_SECONDS", 0.0)  # the real run's estimate is shown however short
    meta = judge_dataset(ds_dir, out=tmp_path / "out", config=cfg, cache_dir=tmp_path / "cache", progress=False,
                         tracking_root=None, force=True, estimate=EstimatePolicy(echo=lines.append))
    card_usage, pool_usage = meta["judge_card"]["llm_usage"], meta["llm_usage"]
    assert est["calls"] == meta["report"]["pool_pairs"] + meta["judge_card"]["n_pairs"]
    again = re.search(r"\((\d+) cached\).*timed sample of (\d+) calls", lines[1])
    assert again and int(again.group(1)) == est["cached"] + est["sample"]  # the dry run's sample is cached now
    # what the run generated, plus both samples, is what the dry run said the judging would make
    assert card_usage["generated"] + pool_usage["generated"] + est["sample"] + int(again.group(2)) == est["to_make"]
