"""lab report on real runs: BM25 configurations on a copy of ORD-QA whose query 10 and one of its relevant
documents carry HTML (a script tag, an img with onerror), from result files and from an MLflow experiment."""
from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from conftest import blank_store

from lab.analysis.report import (
    SECTION_IDS,
    report_experiment,
    report_files,
    worst_query_ids,
)
from lab.cli.main import main
from lab.core.errors import ConfigError

PAYLOAD_Q = ' <script>alert("query")</script><img src=x onerror=alert(1)>'
PAYLOAD_D = "<b onmouseover=alert(2)>evil & bold</b>"
EVIL_LABEL = "low&k1<i>"


def lab(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def payload_dataset(folder: Path) -> Path:
    """ORD-QA copied with HTML appended to query 10 and to its relevant document detailed_placement_6."""
    from lab.core.paths import resolve_repo_path

    src = resolve_repo_path("data/ord-qa")
    ds = folder / "ordqa-html"
    shutil.copytree(src, ds)
    for name, key, extra in (("queries.jsonl", "10", PAYLOAD_Q), ("corpus.jsonl", "detailed_placement_6", PAYLOAD_D)):
        lines = []
        for line in (ds / name).read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            if obj["_id"] == key:
                obj["text"] = PAYLOAD_D + " " + obj["text"] if name == "corpus.jsonl" else obj["text"] + extra
            lines.append(json.dumps(obj, ensure_ascii=False))
        (ds / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ds


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    ds = payload_dataset(base)
    files = base / "results"
    files.mkdir()
    for label, extra in (("bm25", []), (EVIL_LABEL, ["--set", "k1=0.1"])):
        code, out, _ = lab("run", "--dataset", ds, "--strategy", "bm25", *extra, "--json", "--no-progress",
                           "--per-query", files / f"{label}.per_query.csv", "--out", files / f"{label}.trec")
        assert code == 0
        (files / f"{label}.json").write_text(out)
    return {"base": base, "ds": ds, "files": sorted(files.iterdir())}


@pytest.fixture(scope="module")
def file_report(made):
    out = made["base"] / "files.html"
    res = report_files(made["files"], out=out, n_resamples=2000)
    return res, out.read_text(encoding="utf-8")


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.tags, self.attrs = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        d = dict(attrs)
        self.attrs.append((tag, d))
        if "id" in d:
            self.ids.append(d["id"])


def parse(text: str) -> Collect:
    c = Collect()
    c.feed(text)
    return c


def test_every_section_present_once_in_order(file_report):
    _, text = file_report
    ids = [i for i in parse(text).ids if i in SECTION_IDS]
    assert ids == list(SECTION_IDS)


def test_self_contained_no_external_resource_no_script(file_report):
    _, text = file_report
    doc = parse(text)
    assert "script" not in doc.tags and "link" not in doc.tags and "iframe" not in doc.tags
    for tag, attrs in doc.attrs:
        for key in ("src", "href", "srcset", "action", "background"):
            if key in attrs:
                v = attrs[key]
                assert v.startswith("data:image/png;base64,") if key == "src" else v.startswith("#"), (tag, key, v)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)  # no event handler survived escaping
    assert "url(" not in text.split("</style>")[0]


def test_images_are_decodable_pngs(file_report):
    from PIL import Image

    _, text = file_report
    srcs = [a["src"] for t, a in parse(text).attrs if t == "img"]
    # 3 metrics: a bar chart and a distribution each, plus the quality-vs-latency scatter
    assert len(srcs) == 7
    for src in srcs:
        png = base64.b64decode(src.split(",", 1)[1])
        img = Image.open(io.BytesIO(png))
        assert img.format == "PNG" and img.size[0] > 100 and img.size[1] > 100


def test_text_from_data_is_escaped(file_report):
    _, text = file_report
    for raw in ('<script>alert("query")</script>', "<img src=x", "<b onmouseover", "low&k1<i>"):
        assert raw not in text
    assert "&lt;script&gt;alert(&quot;query&quot;)&lt;/script&gt;" in text  # the query, escaped, in worst queries
    assert "&lt;b onmouseover=alert(2)&gt;evil &amp; bold&lt;/b&gt;" in text  # its relevant document
    assert "low&amp;k1&lt;i&gt;" in text  # the run label


def test_leaderboard_matches_files_and_paired_test(made, file_report):
    from lab.metrics import paired_test

    res, _ = file_report
    board = res.leaderboard
    files = {f.name: f for f in made["files"]}
    assert list(board["label"]) == ["bm25", EVIL_LABEL]
    for label in board["label"]:
        summary = json.loads(files[f"{label}.json"].read_text())
        row = board.set_index("label").loc[label]
        for m in ("ndcg@10", "recall@100", "mrr@10"):
            assert row[m] == pytest.approx(summary[m])
            assert row[f"{m}_ci_low"] <= summary[m] <= row[f"{m}_ci_high"]
        assert row["latency_p50_ms"] == pytest.approx(summary["latency_p50_ms"])
    ref = pd.read_csv(files["bm25.per_query.csv"], index_col=0)["ndcg@10"]
    low = pd.read_csv(files[f"{EVIL_LABEL}.per_query.csv"], index_col=0)["ndcg@10"]
    t = paired_test(low.loc[ref.index].to_numpy(), ref.to_numpy(), n_resamples=2000)
    worse = board.iloc[1]
    assert worse["ndcg@10_diff"] == pytest.approx(t["diff"]) and worse["ndcg@10_p"] == t["p_permutation"]
    assert worse["ndcg@10_significant"] and board.iloc[0]["is_reference"]


def test_worst_queries_and_diagnosis_sections(made, file_report):
    res, text = file_report
    files = {f.name: f for f in made["files"]}
    pq = pd.read_csv(files["bm25.per_query.csv"], index_col=0, dtype={"query_id": str})
    worst = worst_query_ids(pq["ndcg@10"], 10)
    assert "10" in worst  # the query with the payload scores 0: it is shown
    section = text.split('id="worst-queries"')[1].split("</section>")[0]
    assert section.count('class="query"') == 10
    for q in worst:
        assert f'id="q-{q}"' in section
    assert "detailed_placement_6" in section and "rank in run" in section
    diag = text.split('id="diagnosis"')[1].split("</section>")[0]
    assert set(res.diagnosis["rule"]) and all(r in diag for r in set(res.diagnosis["rule"]))
    assert "ranking_gap" in set(res.diagnosis.loc[res.diagnosis["run"] == "bm25", "rule"])








def test_cli_report_from_files_and_errors(made, tmp_path):
    out = tmp_path / "r.html"
    code, text, _ = lab("report", *made["files"], "--out", out, "--metric", "ndcg@10", "--worst", "3",
                        "--baseline", EVIL_LABEL)
    assert code == 0 and out.exists() and "KiB" in text and "not logged" in text
    html = out.read_text()
    assert "low&amp;k1&lt;i&gt;</b> (chosen)" in html and html.count('class="query"') == 3
    code, _, err = lab("report", *made["files"], "--experiment", "x")
    assert code == 2 and "not both" in err
    code, _, err = lab("report", tmp_path / "missing.json")
    assert code == 2 and "missing.json" in err
    code, _, err = lab("report", *made["files"], "--baseline", "nope")
    assert code == 2 and "nope" in err
    trec_only = [f for f in made["files"] if f.name.endswith(".trec")]
    code, _, err = lab("report", *trec_only, "--out", tmp_path / "t.html")
    assert code == 2 and "--qrels or --dataset" in err
    code, text, _ = lab("report", *trec_only, "--dataset", made["ds"], "--out", tmp_path / "t.html",
                        "--metric", "ndcg@10")
    assert code == 0 and "means only" not in text


def test_report_from_mlflow_is_logged_as_artifact(made, tmp_path, pytestconfig):
    from lab.analysis.compare import experiment_leaderboard
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context
    from lab.tracking.results import log_result
    from lab.tracking.store import client

    root = blank_store(tmp_path, pytestconfig)
    ids = [log_result(run_experiment(made["ds"], "bm25", p, metrics=["ndcg@10", "recall@100", "mrr@10", "hit_rate@3"],
                                     ctx=Context(progress=False)), experiment="rep", tracking_root=root,
                      n_resamples=200)
           for p in ({}, {"k1": 0.1})]
    res = report_experiment("rep", tracking_root=root, out=tmp_path / "rep.html", metrics=["ndcg@10"], n_resamples=1000)
    text = (tmp_path / "rep.html").read_text()
    assert [i for i in parse(text).ids if i in SECTION_IDS] == list(SECTION_IDS)
    assert set(res.leaderboard["run_id"]) == set(ids)
    assert text.count('class="query"') == 10  # the dataset path came from the runs' result.json
    cl = client(root)
    run = cl.get_run(res.report_run_id)
    assert run.info.status == "FINISHED" and run.data.tags["lab.role"] == "report"
    assert set(run.data.tags["report.runs"].split(",")) == set(ids)
    assert [a.path for a in cl.list_artifacts(res.report_run_id)] == ["report.html"]
    assert len(experiment_leaderboard("rep", tracking_root=root)) == 2  # the report run is not a leaderboard row


def test_trust_block_above_the_leaderboard(file_report):
    res, text = file_report
    assert res.trust["labels"] == {"source": "human", "generator": None, "judge": None, "judge_check": None}
    assert res.trust["n_queries"] == 90 and res.trust["min_detectable_diff"] > 0
    assert text.index("How far to trust this leaderboard") < text.index('id="leaderboard"')
    assert "trust: 90 queries; labels human" in text


def test_report_of_a_generated_set_names_the_generator_and_warns(made, tmp_path):
    ds = tmp_path / "generated"
    shutil.copytree(made["ds"], ds)
    (ds / "provenance.json").write_text(json.dumps({"kind": "generated", "llm": {"identity": "gguf:tiny@1"}}))
    res = report_files(made["files"], out=tmp_path / "gen.html", dataset=str(ds), n_resamples=500)
    text = (tmp_path / "gen.html").read_text()
    assert res.trust["labels"]["source"] == "generated" and res.trust["labels"]["generator"] == "gguf:tiny@1"
    assert "warning: questions and labels were written by a model (gguf:tiny@1)" in text


#: BM25 settings of the sweep-like runs below, and the label the sweep gives each (lab.workbench.config.label).
SWEEP_POINTS = ((0.9, 0.4), (1.2, 0.75), (1.5, 0.75), (2.0, 0.9))


def sweep_like_runs():
    """Four real BM25 runs on ORD-QA labelled as a sweep labels them ("strategy=bm25, params.k1=..., ..."), with
    per-query tables of the report's default metrics and their latency."""
    from lab.analysis.report import RunData
    from lab.core.paths import resolve_repo_path
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context

    runs = []
    for k1, b in SWEEP_POINTS:
        res = run_experiment(resolve_repo_path("data/ord-qa"), "bm25", {"k1": k1, "b": b},
                             metrics=["ndcg@10", "recall@100", "mrr@10"], ctx=Context(progress=False))
        label = f"strategy=bm25, params.k1={k1}, params.b={b}, chunking.chunker=recursive, chunking.size=512"
        runs.append(RunData(label=label, figures={k: float(v) for k, v in res.summary().items()},
                            per_query=res.evaluation.per_query.copy(), source=label, strategy="bm25"))
    return runs


def test_build_report_leaves_its_inputs_unchanged_and_names_runs_short(tmp_path):
    """build_report works on copies: the runs' figures and per-query tables, and the notes passed in, are the same
    objects with the same contents after the call; the leaderboard names runs by their short labels, the whole
    config in the tooltip."""
    import copy

    from lab.analysis.report import build_report

    runs = sweep_like_runs()
    for r in runs:  # figures that disagree with the per-query means: the report uses the means, on its copies
        r.figures["ndcg@10"] = -1.0
    before = [(copy.deepcopy(r.figures), r.per_query.copy(), r.figures, r.per_query) for r in runs]
    notes = ["a note from the caller"]
    res = build_report(runs, tmp_path / "r.html", n_resamples=200, notes=notes, title="sweep")
    assert notes == ["a note from the caller"] and "a note from the caller" in res.notes
    for r, (figs, pq, figs_obj, pq_obj) in zip(runs, before, strict=True):
        assert r.figures is figs_obj and r.figures == figs and r.figures["ndcg@10"] == -1.0
        assert r.per_query is pq_obj
        pd.testing.assert_frame_equal(r.per_query, pq)
    assert (res.leaderboard["ndcg@10"] >= 0).all()  # the copies carry the per-query means
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    board = text[text.index('<section id="leaderboard">'):text.index('<section id="metric-charts">')]
    assert "params.k1=" in board and "params.k1=" not in re.sub(r' title="[^"]*"', "", board)  # tooltips only
    assert '<span title="strategy=bm25, params.k1=1.2, params.b=0.75, chunking.chunker=recursive, ' in board
    assert "k1 1.2 · b 0.75</span>" in board
    with pytest.raises(ConfigError, match="unknown option n_wrost"):
        build_report(runs, tmp_path / "bad.html", n_wrost=3)
