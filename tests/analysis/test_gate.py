"""lab gate on real result files: `lab run --json --per-query --out` of BM25 configurations on ORD-QA (90 queries).

- base:  BM25 k1=1.2            nDCG@10 ~0.589
- near:  BM25 defaults (k1=0.9) nDCG@10 ~0.583: a noise-level drop (-0.006, p ~0.3)
- worse: BM25 k1=0.1            nDCG@10 ~0.490: a real drop (-0.1, p < 0.001)
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import shutil

import pandas as pd
import pytest

from lab.analysis.gate import GateWarning, gate_files, read_result, run_gate
from lab.cli.main import main
from lab.core.errors import ConfigError, DataError

CONFIGS = {"base": ["--set", "k1=1.2"], "near": [], "worse": ["--set", "k1=0.1"]}


def lab(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from lab.core.paths import resolve_repo_path

    d = tmp_path_factory.mktemp("gate")
    ds = resolve_repo_path("data/ord-qa")
    for name, extra in CONFIGS.items():
        code, out, _ = lab("run", "--dataset", ds, "--strategy", "bm25", *extra, "--json", "--no-progress",
                           "--per-query", d / f"{name}.per_query.csv", "--out", d / f"{name}.trec")
        assert code == 0
        (d / f"{name}.json").write_text(out)
        # the same summary without its companion per-query file: means only
        (d / "means").mkdir(exist_ok=True)
        (d / "means" / f"{name}.json").write_text(out)
    return {"dir": d, "qrels": ds / "qrels" / "test.tsv"}


def test_exit_0_when_metrics_hold_and_1_on_a_real_drop(files):
    d = files["dir"]
    code, out, _ = lab("gate", "--baseline", d / "means/near.json", "--current", d / "means/base.json")
    assert code == 0 and "PASSED" in out
    code, out, _ = lab("gate", "--baseline", d / "means/base.json", "--current", d / "means/worse.json",
                       "--metric", "ndcg@10", "recall@10")
    assert code == 1
    assert "FAILED: ndcg@10" in out and "FAIL" in out.splitlines()[2]
    assert "no paired test" in out  # summaries alone carry no per-query data


def test_max_drop_absolute_and_relative(files):
    d = files["dir"]
    b = json.loads((d / "base.json").read_text())["ndcg@10"]
    w = json.loads((d / "worse.json").read_text())["ndcg@10"]
    drop = b - w
    assert drop > 0.05
    assert lab("gate", "--baseline", d / "means/base.json", "--current", d / "means/worse.json",
               "--max-drop", drop + 0.001)[0] == 0
    assert lab("gate", "--baseline", d / "means/base.json", "--current", d / "means/worse.json",
               "--max-drop", drop - 0.001)[0] == 1
    # relative: the drop is drop / b of the baseline
    rel = drop / b
    assert lab("gate", "--baseline", d / "means/base.json", "--current", d / "means/worse.json", "--relative",
               "--max-drop", rel + 0.002)[0] == 0
    assert lab("gate", "--baseline", d / "means/base.json", "--current", d / "means/worse.json", "--relative",
               "--max-drop", rel - 0.002)[0] == 1
    # a threshold spelt -0.02: same meaning
    assert lab("gate", "--baseline", d / "means/base.json", "--current", d / "means/worse.json",
               "--max-drop", -(drop + 0.001))[0] == 0


def test_noise_level_drop_vs_real_drop_with_per_query_data(files):
    """Both drops exceed a 0.005 allowance; only the real one is significant, so --significant-only fails it
    alone. The companion X.per_query.csv beside X.json supplies the per-query data."""
    d = files["dir"]
    noise = gate_files(d / "base.json", d / "near.json", max_drop=0.005)
    real = gate_files(d / "base.json", d / "worse.json", max_drop=0.005)
    assert noise.warnings == [] and real.warnings == []
    (n,), (r,) = noise.rows, real.rows
    assert -0.02 < n.diff < -0.005 and n.exceeds and n.p_value > 0.05 and not n.significant
    assert r.diff < -0.05 and r.exceeds and r.p_value < 0.001 and r.significant
    assert n.n_paired == r.n_paired == 90 and r.ci_high < 0 < n.ci_high
    assert not noise.passed and not real.passed  # without --significant-only both fail
    code, out, _ = lab("gate", "--baseline", d / "base.json", "--current", d / "near.json", "--max-drop", 0.005,
                       "--significant-only")
    assert code == 0 and "noise" in out and "not significantly" in out
    code, out, _ = lab("gate", "--baseline", d / "base.json", "--current", d / "worse.json", "--max-drop", 0.005,
                       "--significant-only")
    assert code == 1 and "FAIL" in out


def test_p_value_is_lab_metrics_paired_test(files):
    from lab.metrics import paired_test

    d = files["dir"]
    rep = gate_files(d / "base.per_query.csv", d / "worse.per_query.csv", metrics=["mrr@10"], n_resamples=2000)
    a = pd.read_csv(d / "worse.per_query.csv", index_col=0)["mrr@10"]
    b = pd.read_csv(d / "base.per_query.csv", index_col=0)["mrr@10"]
    t = paired_test(a.to_numpy(), b.loc[a.index].to_numpy(), n_resamples=2000)
    row = rep.rows[0]
    assert row.p_value == t["p_permutation"] and row.ci_low == t["ci_low"] and row.diff == pytest.approx(t["diff"])


def test_trec_runs_with_qrels(files):
    d, qrels = files["dir"], files["qrels"]
    code, out, _ = lab("gate", "--baseline", d / "base.trec", "--current", d / "worse.trec", "--qrels", qrels,
                       "--json")
    doc = json.loads(out)
    assert code == 1 and doc["passed"] is False
    row = doc["rows"][0]
    summary = json.loads((d / "worse.json").read_text())
    assert row["current"] == pytest.approx(summary["ndcg@10"]) and row["p_value"] < 0.001 and row["n_paired"] == 90
    assert lab("gate", "--baseline", d / "base.trec", "--current", d / "near.trec", "--qrels", qrels)[0] == 0


def test_mixed_inputs_and_json_per_query(files, tmp_path):
    d = files["dir"]
    pq = pd.read_csv(d / "worse.per_query.csv", index_col=0, dtype={"query_id": str})
    pq.to_json(tmp_path / "worse.json", orient="index", indent=1)  # what `lab evaluate --per-query x.json` writes
    res = read_result(tmp_path / "worse.json")
    assert res.kind == "per_query" and len(res.per_query) == 90
    assert all(isinstance(q, str) for q in res.per_query.index) and "10" in res.per_query.index
    code, out, _ = lab("gate", "--baseline", d / "base.json", "--current", tmp_path / "worse.json")
    assert code == 1 and "0.0001" in out  # paired test: base.json has its companion, the JSON table is per-query


def test_metrics_version_and_dataset_warnings(files, tmp_path):
    d = files["dir"]
    doc = json.loads((d / "base.json").read_text())
    doc["_meta"]["metrics_version"] = "0"
    doc["_meta"]["dataset_fingerprint"] = "0000"
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.warns(GateWarning) as rec:
        rep = gate_files(tmp_path / "old.json", d / "means/base.json")
    text = " ".join(str(w.message) for w in rec)
    assert "metrics_version" in text and "not comparable" in text and "fingerprints differ" in text
    assert rep.passed and len(rep.warnings) == 2
    code, out, _ = lab("gate", "--baseline", tmp_path / "old.json", "--current", d / "means/base.json")
    assert code == 0 and "warning: " in out and "metrics_version" in out


@pytest.mark.parametrize("case", ["missing", "empty", "badjson", "trec_without_qrels", "unknown_metric",
                                  "absent_metric", "nan", "stale_companion", "not_a_result", "sig_without_pq"])
def test_bad_input_exits_2_naming_the_file(files, tmp_path, case):
    d = files["dir"]
    good = d / "means/base.json"
    bad = tmp_path / "bad.json"
    extra = []
    if case == "missing":
        bad = tmp_path / "nope.json"
    elif case == "empty":
        bad.write_text("")
    elif case == "badjson":
        bad.write_text('{"ndcg@10": 0.5,\n  oops}')
    elif case == "trec_without_qrels":
        bad = d / "base.trec"
    elif case == "unknown_metric":
        bad, extra = good, ["--metric", "ndgc@10"]
    elif case == "absent_metric":
        bad.write_text(json.dumps({"recall@10": 0.5}))
    elif case == "nan":
        bad = tmp_path / "bad.csv"
        bad.write_text("query_id,ndcg@10\n1,0.5\n2,\n")
    elif case == "stale_companion":
        bad = tmp_path / "base.json"
        shutil.copy(d / "base.json", bad)
        shutil.copy(d / "worse.per_query.csv", tmp_path / "base.per_query.csv")
    elif case == "not_a_result":
        bad = tmp_path / "notes.txt"
        bad.write_text("hello world\n")
    elif case == "sig_without_pq":
        bad, extra = good, ["--significant-only"]
    code, out, err = lab("gate", "--baseline", good, "--current", bad, *extra)
    assert code == 2 and out == ""
    assert err.startswith("error: ")
    if case not in ("unknown_metric",):
        assert str(bad) in err or bad.name in err
    if case == "badjson":
        assert "line 2" in err
    if case == "trec_without_qrels":
        assert "--qrels" in err
    if case == "stale_companion":
        assert "base.per_query.csv" in err and "does not belong" in err


def test_run_gate_api_errors(files):
    d = files["dir"]
    base, cur = read_result(d / "base.json"), read_result(d / "near.json")
    with pytest.raises(ConfigError, match="alpha"):
        run_gate(base, cur, alpha=1.5)
    with pytest.raises(ConfigError, match="relative"):
        run_gate(base, cur, max_drop=1.5, relative=True)
    with pytest.raises(DataError, match="map@7"):
        run_gate(base, cur, metrics=["map@7"])
    rep = run_gate(base, cur, metrics=["ndcg@10", "recall@100"], max_drop=0.5)
    assert rep.passed and rep.exit_code == 0 and [r.metric for r in rep.rows] == ["ndcg@10", "recall@100"]
    assert all(not math.isnan(r.p_value) for r in rep.rows)
    assert json.loads(json.dumps(rep.to_dict()))["passed"] is True


# ---------------------------------------------------------------------------------------------------------------
# the CI workflow that runs the gate (.github/workflows/rag-eval.yml)
# ---------------------------------------------------------------------------------------------------------------
def repo():
    from lab.core.paths import repo_root

    return repo_root()


def workflow():
    import yaml

    return yaml.safe_load((repo() / ".github/workflows/rag-eval.yml").read_text(encoding="utf-8"))


def run_scripts() -> list[str]:
    """The `run:` scripts of the workflow, with backslash continuations joined."""
    steps = [s for job in workflow()["jobs"].values() for s in job["steps"]]
    return [s["run"].replace("\\\n", " ") for s in steps if "run" in s]


def lab_invocations() -> list[tuple[str, list[str]]]:
    """(subcommand, its --options) of every `lab` command the workflow runs."""
    import re

    out = []
    for script in run_scripts():
        for m in re.finditer(r"(?:^|[\s;|&(])(?:\.venv/bin/)?lab\s+([a-z][a-z-]*)([^\n|;&<>]*)", script):
            out.append((m.group(1), re.findall(r"(?<!\S)(--[a-z][a-z-]*)", m.group(2))))
    return out


def test_workflow_parses_and_triggers_on_the_knowledge_base_and_config():
    doc = workflow()
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads the key `on` as True
    for event in ("push", "pull_request"):
        assert set(on[event]["paths"]) == {"knowledge-base/**", "retrieval-config/**"}
    steps = doc["jobs"]["evaluate"]["steps"]
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") and s["with"]["path"] == "reports/"
               and s.get("if") == "always()" for s in steps)
    assert any("make setup" in s for s in run_scripts())
    assert doc["defaults"]["run"]["shell"] == "bash"  # -eo pipefail: `lab gate ... | tee` keeps the exit code


def test_workflow_commands_exist_in_our_cli():
    """Each `lab <cmd>` of the workflow answers --help, and every --option it passes is one that cmd takes."""
    import argparse

    from lab.cli.main import build_parser

    calls = lab_invocations()
    assert {c for c, _ in calls} >= {"run", "report", "gate"}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for cmd, options in calls:
        with pytest.raises(SystemExit) as exc, contextlib.redirect_stdout(io.StringIO()) as buf:
            main([cmd, "--help"])
        assert exc.value.code == 0 and f"usage: lab {cmd}" in buf.getvalue()
        known = set(sub.choices[cmd]._option_string_actions)
        assert set(options) <= known, (cmd, set(options) - known)


def test_workflow_inputs_exist_and_are_valid():
    """The candidates name registered strategies; the committed baseline is a result the gate reads, with its
    per-query companion, holding the gated metric; the Makefile has the setup target the workflow calls."""
    import re

    from lab.retrievers import available

    root = repo()
    lines = [ln.split() for ln in (root / "retrieval-config/candidates.txt").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines and all(len(ln) >= 2 and ln[1] in available() for ln in lines)
    assert len({ln[0] for ln in lines}) == len(lines)  # labels name files: unique
    base = read_result(root / "reports/baseline.json")
    assert base.per_query is not None and "ndcg@10" in base.means and base.metrics_version is not None
    assert re.search(r"^setup:", (root / "Makefile").read_text(), re.MULTILINE)
    assert (root / "knowledge-base/README.md").exists() and (root / "reports/README.md").exists()
