"""Coverage and width of prediction-powered (PPI++) leaderboard intervals, against the human-only and judge-only ones.

A leaderboard on a judged set scores every query under the judge's labels and a uniform random sample of queries
under people's labels. This script checks what lab.metrics.ppi promises, with a set's human qrels standing in for
the people and their mean over every query of the population as the truth:

- for each run (bm25, dense; nDCG@10 at document level, the leaderboard's metric) and each judge, over many seeded
  uniform random subsets of ``--sizes`` queries (the "human-graded" sample), the 95% interval of PPI++
  (ppi_mean: human subset + judge on the other queries), of the human subset alone (human_mean) and of the judge
  on every query (judge_mean): how often each covers the true mean, and its mean width;
- the same for the paired difference bm25 - dense (ppi_paired_difference);
- simulated judges: the human labels of the pooled pairs (top ``--depth`` of each run) flipped with a false
  negative rate fn and a false positive rate fp (seeded), to show where PPI helps and where it does not, with
  "human-only queries needed for PPI's width", (w_human / w_ppi)^2 at equal n.

Relevance: a human label >= 1 (both sets are binary); a judge grade >= 2 (UMBRELA's threshold, as `lab testset
judge-check` reads it), gain 1; each real judge is also read at grade >= 3 ("grade 3, post hoc": a reading chosen
after seeing how lenient the judges are, so its figures are exploratory) and as a leaderboard on a judged set
scores them ("grades as written": grade >= 1 relevant, gain = grade; lab.metrics.ppi.per_query_under). A pair the
judge did not grade (outside the pool) counts as not relevant. A query where the judge finds nothing relevant
scores 0 under the judge.

Input: a folder per set (``--data``, default benchmarks/data/ppi/<set>/): ``qrels.tsv`` (the human qrels of the
population), ``bm25.trec`` and ``dense.trec`` (top 10), ``judge-<name>.tsv`` (every pooled pair with the judge's
0-3 grade) and a ``population.txt`` of query ids. ``--prepare`` makes such a folder from a set, the strategies'
runs and the folders written by `lab testset judge --out` (their qrels provenance sidecar holds the judge grades).

    .venv/bin/python benchmarks/ppi_coverage.py --sample data/scifact --queries 120 --seed 0 --out /tmp/pop/scifact
    .venv/bin/python benchmarks/ppi_coverage.py --prepare scifact --dataset /tmp/pop/scifact \\
        --judged smollm2=/tmp/j/scifact-smollm2,qwen=/tmp/j/scifact-qwen
    .venv/bin/python benchmarks/ppi_coverage.py --subsets 200 --sizes 30,60 --seed 0 --json /tmp/ppi.json
    .venv/bin/python benchmarks/ppi_coverage.py --smoke      # a few subsets: checks that it runs (CI)
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.data.beir import load_dataset
from lab.data.trec import read_qrels, read_trec_run, write_trec_run
from lab.data.types import Run
from lab.experiment.run import Context, run_experiment
from lab.metrics.ppi import human_mean, judge_mean, per_query_under, ppi_mean, ppi_paired_difference
from lab.metrics.ranking import evaluate, ndcg_at_k

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data" / "ppi"
RUNS = ("bm25", "dense")
K = 10
ALPHA = 0.05
JUDGE_RELEVANT = 2  # a judge grade >= 2 is relevant (UMBRELA)
#: Simulated judges: (false negative rate, false positive rate) on the pooled pairs.
SIMULATED = ((0.05, 0.05), (0.1, 0.1), (0.2, 0.2), (0.3, 0.3), (0.3, 0.05), (0.05, 0.3), (0.5, 0.5))


@dataclass
class SetData:
    """One set's population: query ids, human qrels, the runs' top 10, the pool and each judge's grades."""

    name: str
    qids: list[str]
    human: dict[str, dict[str, int]]
    runs: dict[str, Run]
    judges: dict[str, dict[tuple[str, str], int]]
    depth: int

    def pool(self) -> list[tuple[str, str]]:
        """(query, doc) pairs in the top ``depth`` of any run, sorted."""
        return sorted({(q, d) for r in self.runs.values() for q in self.qids for d, _ in r.ranked(q, self.depth)})


def fail(msg: str) -> None:
    print(f"ppi_coverage: {msg}", file=sys.stderr)
    raise SystemExit(2)


# ---------------------------------------------------------------------------------------------------------------
# per-query metric
# ---------------------------------------------------------------------------------------------------------------
def per_query_ndcg(run: Run, qids: list[str], relevant: dict[str, set[str]]) -> np.ndarray:
    """nDCG@10 per query with binary gains: ``relevant[q]`` the documents that count (0 when none)."""
    grades = np.zeros((len(qids), K))
    ideal = np.zeros((len(qids), K))
    for i, q in enumerate(qids):
        rel = relevant.get(q, set())
        for r, (d, _) in enumerate(run.ranked(q, K)):
            grades[i, r] = 1.0 if d in rel else 0.0
        ideal[i, :min(K, len(rel))] = 1.0
    return ndcg_at_k(grades, ideal, k=K)


def human_relevant(human: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    return {q: {d for d, g in docs.items() if g >= 1} for q, docs in human.items()}


def judge_relevant(grades: dict[tuple[str, str], int], threshold: int = JUDGE_RELEVANT) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (q, d), g in grades.items():
        if g >= threshold:
            out.setdefault(q, set()).add(d)
    return out


def simulated_judge(s: SetData, fn: float, fp: float, seed: int) -> dict[str, set[str]]:
    """The human labels of the pooled pairs, each flipped (seeded): relevant -> not with rate fn, not -> relevant
    with rate fp; pairs outside the pool stay unjudged (not relevant), as with a real judge."""
    rng = np.random.default_rng(seed)
    rel = human_relevant(s.human)
    out: dict[str, set[str]] = {}
    for q, d in s.pool():
        u = rng.random()
        is_rel = d in rel.get(q, set())
        if (is_rel and u >= fn) or (not is_rel and u < fp):
            out.setdefault(q, set()).add(d)
    return out


def agreement(s: SetData, judged: dict[str, set[str]]) -> tuple[float, float]:
    """Share of pooled pairs where the judge's relevance equals the people's, and Cohen's kappa."""
    rel = human_relevant(s.human)
    h, j = [], []
    for q, d in s.pool():
        h.append(d in rel.get(q, set()))
        j.append(d in judged.get(q, set()))
    h_a, j_a = np.array(h, dtype=float), np.array(j, dtype=float)
    po = float(np.mean(h_a == j_a))
    pe = float(h_a.mean() * j_a.mean() + (1 - h_a.mean()) * (1 - j_a.mean()))
    kappa = (po - pe) / (1 - pe) if pe < 1 else 0.0
    return po, kappa


# ---------------------------------------------------------------------------------------------------------------
# coverage
# ---------------------------------------------------------------------------------------------------------------
def draw_subsets(n_pop: int, size: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(n_pop, size=size, replace=False)) for _ in range(count)]


def coverage(y: np.ndarray, yhat: np.ndarray, subsets: list[np.ndarray]) -> dict:
    """Coverage of mean(y) and mean width of the PPI++, human-only and judge-only 95% intervals."""
    truth = float(y.mean())
    mask = np.zeros(len(y), dtype=bool)
    cov = {"ppi": [], "human_only": [], "judge_only": []}
    width = {"ppi": [], "human_only": [], "judge_only": []}
    lams = []
    j = judge_mean(yhat, alpha=ALPHA)
    for idx in subsets:
        mask[:] = False
        mask[idx] = True
        p = ppi_mean(y[mask], yhat[mask], yhat[~mask], alpha=ALPHA)
        h = human_mean(y[mask], alpha=ALPHA)
        for key, ci in (("ppi", p.ci), ("human_only", h.ci), ("judge_only", j.ci)):
            cov[key].append(ci[0] <= truth <= ci[1])
            width[key].append(ci[1] - ci[0])
        lams.append(p.lam)
    out = {"truth": truth, "judge_mean": j.mean, "n_subsets": len(subsets), "mean_lambda": float(np.mean(lams))}
    for key in cov:
        out[key] = {"coverage": float(np.mean(cov[key])), "mean_width": float(np.mean(width[key]))}
    out["queries_ratio"] = (out["human_only"]["mean_width"] / out["ppi"]["mean_width"]) ** 2
    return out


def diff_coverage(ya: np.ndarray, yb: np.ndarray, ha: np.ndarray, hb: np.ndarray, subsets: list[np.ndarray]) -> dict:
    """Coverage and width of the paired difference a - b: PPI++, human-only and judge-only."""
    truth = float((ya - yb).mean())
    mask = np.zeros(len(ya), dtype=bool)
    cov = {"ppi": [], "human_only": [], "judge_only": []}
    width = {"ppi": [], "human_only": [], "judge_only": []}
    j = judge_mean(ha - hb, alpha=ALPHA)
    for idx in subsets:
        mask[:] = False
        mask[idx] = True
        p, _ = ppi_paired_difference(ya[mask], yb[mask], ha[mask], hb[mask], ha[~mask], hb[~mask], alpha=ALPHA)
        h = human_mean((ya - yb)[mask], alpha=ALPHA)
        for key, ci in (("ppi", p.ci), ("human_only", h.ci), ("judge_only", j.ci)):
            cov[key].append(ci[0] <= truth <= ci[1])
            width[key].append(ci[1] - ci[0])
    out = {"truth": truth, "judge_mean": j.mean, "n_subsets": len(subsets)}
    for key in cov:
        out[key] = {"coverage": float(np.mean(cov[key])), "mean_width": float(np.mean(width[key]))}
    out["queries_ratio"] = (out["human_only"]["mean_width"] / out["ppi"]["mean_width"]) ** 2
    return out


def study(s: SetData, judge_name: str, judged: dict[str, set[str]], sizes: list[int], n_subsets: int,
          seed: int, yhat: dict[str, np.ndarray] | None = None) -> dict:
    """Every run and the paired difference, at every subset size, for one judge (``judged``: the documents it
    holds relevant; ``yhat``: its per-query metric when not the binary nDCG@10 of ``judged``)."""
    relevant = human_relevant(s.human)
    y = {r: per_query_ndcg(s.runs[r], s.qids, relevant) for r in RUNS}
    if yhat is None:
        yhat = {r: per_query_ndcg(s.runs[r], s.qids, judged) for r in RUNS}
    agree, kappa = agreement(s, judged)
    out = {"set": s.name, "judge": judge_name, "n_population": len(s.qids), "pool_pairs": len(s.pool()),
           "agreement": agree, "kappa": kappa,
           "corr": {r: float(np.corrcoef(y[r], yhat[r])[0, 1]) if np.std(yhat[r]) > 0 else 0.0 for r in RUNS},
           "sizes": {}}
    for size in sizes:
        if size >= len(s.qids):
            continue
        subsets = draw_subsets(len(s.qids), size, n_subsets, seed + size)
        row = {r: coverage(y[r], yhat[r], subsets) for r in RUNS}
        row["bm25 - dense"] = diff_coverage(y["bm25"], y["dense"], yhat["bm25"], yhat["dense"], subsets)
        out["sizes"][str(size)] = row
    return out


# ---------------------------------------------------------------------------------------------------------------
# input
# ---------------------------------------------------------------------------------------------------------------
def read_judge_tsv(path: Path) -> dict[tuple[str, str], int]:
    out = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if n == 1 or not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not parts[2].strip().isdigit() or not 0 <= int(parts[2]) <= 3:
            fail(f"{path}:{n}: expected query-id<TAB>corpus-id<TAB>grade 0-3, got {line[:80]!r}")
        out[parts[0], parts[1]] = int(parts[2])
    return out


def load_set(folder: Path) -> SetData:
    for f in ("population.txt", "qrels.tsv", *(f"{r}.trec" for r in RUNS)):
        if not (folder / f).is_file():
            fail(f"{folder}: no {f} (make the folder with --prepare)")
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8")) if (folder / "meta.json").is_file() else {}
    qids = [q for q in (folder / "population.txt").read_text(encoding="utf-8").split() if q]
    human = read_qrels(folder / "qrels.tsv").qrels
    missing = [q for q in qids if not any(g >= 1 for g in human.get(q, {}).values())]
    if missing:
        fail(f"{folder / 'population.txt'}: query {missing[0]} has no relevant document in qrels.tsv")
    runs = {r: read_trec_run(folder / f"{r}.trec", name=r) for r in RUNS}
    judges = {p.stem.removeprefix("judge-"): read_judge_tsv(p) for p in sorted(folder.glob("judge-*.tsv"))}
    s = SetData(folder.name, qids, human, runs, judges, int(meta.get("depth", 5)))
    # the arrays above must give the metric `lab run` gives: checked on the human qrels
    ev = evaluate({q: human[q] for q in qids}, runs["bm25"], ["ndcg@10"]).per_query["ndcg@10"]
    mine = per_query_ndcg(runs["bm25"], qids, human_relevant(human))
    if not np.allclose(ev.loc[qids].to_numpy(), mine):
        fail(f"{folder}: per-query nDCG@10 differs from lab.metrics.ranking.evaluate")
    return s


# ---------------------------------------------------------------------------------------------------------------
# preparing the inputs
# ---------------------------------------------------------------------------------------------------------------
def sample_population(dataset: Path, queries: int, seed: int, out: Path) -> None:
    """A copy of a BEIR set whose test split is a seeded uniform sample of ``queries`` test queries (the corpus is
    linked, not copied)."""
    rows = [ln.split("\t") for ln in (dataset / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
            if ln.strip()]
    qids = sorted({r[0] for r in rows})
    if queries > len(qids):
        fail(f"--queries {queries}: the test split of {dataset} has {len(qids)} queries")
    keep = set(random.Random(seed).sample(qids, queries))
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    for c in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (dataset / c).exists() and not (out / c).exists():
            (out / c).symlink_to((dataset / c).resolve())
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for line in (dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip() and json.loads(line)["_id"] in keep:
                fh.write(line + "\n")
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for r in rows:
            if r[0] in keep:
                fh.write("\t".join(r[:3]) + "\n")
    print(f"{len(keep)} of {len(qids)} test queries of {dataset} (seed {seed}) -> {out}")


def read_judged_folder(label: str, folder: Path) -> tuple[dict[tuple[str, str], int], dict]:
    """The judge grades of every pair a `lab testset judge --out` folder graded, and its report."""
    side = folder / "qrels" / "test.provenance.jsonl"
    if not side.is_file():
        fail(f"--judged {label}={folder}: no {side} (a folder written by `lab testset judge --out`)")
    grades = {}
    for line in side.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("judge_grade") is not None:
            grades[rec["query_id"], rec["doc_id"]] = int(rec["judge_grade"])
    report_path = folder / "judge_report.json"
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.is_file() else {}
    return grades, report


def prepare(name: str, dataset: Path, judged: dict[str, Path], depth: int, data: Path, cache_dir: Path) -> None:
    """Write ``data/name``: the population, its human qrels, the runs' top 10 and each judge's pooled grades.
    With judges, the population is the test queries whose whole pool every judge graded."""
    ds = load_dataset(dataset, splits=["test"], progress=False)
    human = read_qrels(dataset / "qrels" / "test.tsv")
    qids = sorted(human.qrels)
    ctx = Context(cache_dir=cache_dir, progress=False, seed=0)
    runs = {r: run_experiment(ds, r, {}, split="test", k=K, ctx=ctx).run for r in RUNS}
    pool = {q: {d for run in runs.values() for d, _ in run.ranked(q, depth)} for q in qids}
    judges = {label: read_judged_folder(label, folder) for label, folder in judged.items()}
    n_all = len(qids)
    qids = [q for q in qids if all((q, d) in g for g, _ in judges.values() for d in pool[q])]
    if not qids:
        fail(f"--judged: no query of {dataset} has its whole pool (depth {depth}) graded by every judge")
    out = data / name
    out.mkdir(parents=True, exist_ok=True)
    for r, run in runs.items():
        write_trec_run(Run({q: run.scores.get(q, {}) for q in qids}, name=r), out / f"{r}.trec", tag=r, k=K)
    (out / "population.txt").write_text("\n".join(qids) + "\n", encoding="utf-8")
    (out / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q in qids for d, g in human.qrels[q].items()), encoding="utf-8")
    pairs = sorted((q, d) for q in qids for d in pool[q])
    meta = {"dataset": str(dataset), "depth": depth, "k": K, "n_queries": len(qids), "n_test_queries": n_all,
            "pool_pairs": len(pairs), "judges": {}}
    for label, (grades, report) in judges.items():
        (out / f"judge-{label}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{grades[q, d]}\n" for q, d in pairs), encoding="utf-8")
        meta["judges"][label] = {"identity": report.get("judge"), "prompt_version": report.get("prompt_version"),
                                 "grammar": report.get("grammar"), "max_passage_chars": report.get("max_passage_chars"),
                                 "judge_seconds": report.get("judge_seconds"),
                                 "grades": {str(g): sum(1 for p in pairs if grades[p] == g) for g in range(4)}}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(meta, indent=1))


# ---------------------------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------------------------
def cell(c: dict) -> str:
    return f"{c['coverage']:.3f} / {c['mean_width']:.3f}"


def print_tables(results: dict) -> None:
    print("## Real judges: coverage / mean width of the 95% intervals")
    print()
    print("| set | judge | pooled pairs | agreement | kappa | human-graded n of N | run | true mean | PPI++ | "
          "human-only | judge-only (judge's mean) | mean lambda | human queries for PPI's width |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["real"]:
        for size, rows in r["sizes"].items():
            for run, c in rows.items():
                lam = f"{c['mean_lambda']:.2f}" if "mean_lambda" in c else "-"
                print(f"| {r['set']} | {r['judge']} | {r['pool_pairs']} | {r['agreement']:.2f} | {r['kappa']:.2f} | "
                      f"{size} of {r['n_population']} | {run} | {c['truth']:.3f} | {cell(c['ppi'])} | "
                      f"{cell(c['human_only'])} | {cell(c['judge_only'])} ({c['judge_mean']:.3f}) | {lam} | "
                      f"{c['queries_ratio']:.2f}x |")
    print()
    print("## Simulated judges (human labels of pooled pairs flipped): coverage / mean width")
    print()
    print("| set | fn | fp | agreement | kappa | n of N | run | PPI++ | human-only | judge-only | mean lambda | "
          "human queries for PPI's width |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["simulated"]:
        for size, rows in r["sizes"].items():
            for run, c in rows.items():
                lam = f"{c['mean_lambda']:.2f}" if "mean_lambda" in c else "-"
                print(f"| {r['set']} | {r['fn']:.2f} | {r['fp']:.2f} | {r['agreement']:.2f} | {r['kappa']:.2f} | "
                      f"{size} of {r['n_population']} | {run} | {cell(c['ppi'])} | {cell(c['human_only'])} | "
                      f"{cell(c['judge_only'])} | {lam} | {c['queries_ratio']:.2f}x |")
    print()
    print("## One row per set, judge and size (coverage: bm25 / dense / bm25 - dense; corr and widths: bm25)")
    print()
    print("| set | judge | agreement | kappa | corr | n of N | PPI++ coverage | human-only coverage | "
          "judge-only coverage | PPI++ width | human-only width | human queries for PPI's width |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["real"] + results["simulated"]:
        for size, rows in r["sizes"].items():
            def trio(key, rows=rows):
                return " / ".join(f"{rows[run][key]['coverage']:.3f}" for run in rows)
            ratios = " / ".join(f"{rows[run]['queries_ratio']:.2f}x" for run in rows)
            print(f"| {r['set']} | {r['judge']} | {r['agreement']:.2f} | {r['kappa']:.2f} | {r['corr']['bm25']:.2f} | "
                  f"{size} of {r['n_population']} | {trio('ppi')} | {trio('human_only')} | {trio('judge_only')} | "
                  f"{rows['bm25']['ppi']['mean_width']:.3f} | {rows['bm25']['human_only']['mean_width']:.3f} | "
                  f"{ratios} |")
    print()
    print("## PPI++ coverage, lowest over runs and difference, per set and subset size")
    print()
    print("| set | judges | n | lowest PPI++ coverage | nominal |")
    print("|---|---|---|---|---|")
    for name, by_key in results["summary"]["lowest_ppi_coverage"].items():
        for key, value in by_key.items():
            size, kind = key.split(" ")
            print(f"| {name} | {kind} | {size} | {value:.3f} | 0.95 |")


def summarise(results: dict) -> dict:
    """The lowest PPI++ coverage over runs and the difference: {set: {"SIZE real"|"SIZE simulated": value}}."""
    low: dict[str, dict[str, float]] = {}
    for kind in ("real", "simulated"):
        for r in results[kind]:
            for size, rows in r["sizes"].items():
                v = min(c["ppi"]["coverage"] for c in rows.values())
                key = f"{size} {kind}"
                low.setdefault(r["set"], {})[key] = min(low.get(r["set"], {}).get(key, 1.0), v)
    return {"lowest_ppi_coverage": low}


def combine(paths: list[Path], low: float = 0.93) -> dict:
    """Coverage over several seeds' JSON files (``--combine``): per set and size, PPI++ and human-only coverage
    pooled over every simulated-judge cell (runs, difference, judges, seeds), the lowest cell, how many cells fall
    under ``low`` and how many a procedure of exactly 0.95 would put there by chance (each cell a binomial count
    over its subsets; cells share subsets, so the count varies more than independent cells would); and the
    human-only queries ratio of the 90 % judge (fn = fp = 0.1), mean over the seeds."""
    from scipy.stats import binom

    docs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    cells: dict[tuple[str, str], dict[str, list[float]]] = {}
    ratios: dict[tuple[str, str], list[list[float]]] = {}
    n_subsets = {d["subsets"] for d in docs}
    if len(n_subsets) != 1:
        fail(f"--combine: the files hold {sorted(n_subsets)} subsets per size; combine runs made alike")
    n = n_subsets.pop()
    for d in docs:
        for r in d["simulated"]:
            for size, rows in r["sizes"].items():
                c = cells.setdefault((r["set"], size), {"ppi": [], "human_only": []})
                for key in c:
                    c[key] += [row[key]["coverage"] for row in rows.values()]
                if (r["fn"], r["fp"]) == (0.1, 0.1):
                    ratios.setdefault((r["set"], size), []).append([row["queries_ratio"] for row in rows.values()])
    p_low = float(binom.cdf(math.ceil(low * n) - 1, n, 0.95))  # P(coverage < low) for a true 0.95 cell
    out = {"subsets": n, "seeds": [d["seed"] for d in docs], "low": low, "p_cell_below_low": p_low, "sets": []}
    for (name, size), c in cells.items():
        ppi, hum = np.array(c["ppi"]), np.array(c["human_only"])
        independent = n * len(docs)  # subsets drawn independently: one set per seed, shared by the cells
        out["sets"].append({
            "set": name, "size": int(size), "cells": len(ppi),
            "ppi_pooled": float(ppi.mean()), "ppi_lowest": float(ppi.min()),
            "ppi_cells_below_low": int((ppi < low).sum()), "expected_below_low": p_low * len(ppi),
            "human_only_pooled": float(hum.mean()), "human_only_lowest": float(hum.min()),
            "pooled_mc_error": math.sqrt(0.95 * 0.05 / independent), "cell_mc_error": math.sqrt(0.95 * 0.05 / n),
            "ratio_90pct_judge_mean": [float(x) for x in np.mean(ratios.get((name, size), [[np.nan] * 3]), axis=0)],
            "ratio_90pct_judge_per_seed": ratios.get((name, size), []),
        })
    return out


def print_combined(c: dict) -> None:
    print(f"## PPI++ coverage over seeds {', '.join(map(str, c['seeds']))} (simulated judges, {c['subsets']} subsets "
          "per cell)")
    print()
    print(f"A cell of true coverage 0.95 reads under {c['low']} with probability {c['p_cell_below_low']:.3f}.")
    print()
    print("| set, n graded | cells | PPI++ pooled | PPI++ lowest cell | cells under 0.93 (expected at 0.95) | "
          "human-only pooled | human-only lowest cell | human queries for PPI's width, 90 % judge (mean of seeds) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in c["sets"]:
        ratio = " / ".join(f"{x:.2f}x" for x in r["ratio_90pct_judge_mean"])
        print(f"| {r['set']}, {r['size']} | {r['cells']} | {r['ppi_pooled']:.3f} | {r['ppi_lowest']:.3f} | "
              f"{r['ppi_cells_below_low']} ({r['expected_below_low']:.1f}) | {r['human_only_pooled']:.3f} | "
              f"{r['human_only_lowest']:.3f} | {ratio} |")
    print()
    print(f"Monte Carlo standard error of a 0.95 coverage: {c['sets'][0]['cell_mc_error']:.3f} per cell "
          f"({c['subsets']} subsets), {c['sets'][0]['pooled_mc_error']:.3f} pooled (counting only the "
          f"{c['subsets'] * len(c['seeds'])} independently drawn subsets per set and size).")


def run_combine(files_arg: str, json_out: Path | None) -> None:
    files = [Path(x) for x in files_arg.split(",") if x]
    for f in files:
        if not f.is_file():
            fail(f"--combine: no file {f} (write one with --json)")
    combined = combine(files)
    print_combined(combined)
    if json_out:
        json_out.write_text(json.dumps(combined, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="folder of per-set input folders")
    ap.add_argument("--sets", default="", help="comma-separated set folders under --data (default: all)")
    ap.add_argument("--subsets", type=int, default=200, help="random human-graded subsets per size")
    ap.add_argument("--sizes", default="30,60", help="comma-separated subset sizes (queries graded by people)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write every figure to this JSON file")
    ap.add_argument("--smoke", action="store_true", help="few subsets and simulated judges (CI)")
    ap.add_argument("--combine", metavar="JSON,...", help="print coverage over several --json files (one per seed) "
                    "and stop")
    ap.add_argument("--sample", type=Path, metavar="DATASET", help="write a seeded sample of the test queries of "
                    "DATASET to --out (with --queries) and stop")
    ap.add_argument("--queries", type=int, help="with --sample: queries drawn")
    ap.add_argument("--out", type=Path, help="with --sample: the new folder")
    ap.add_argument("--prepare", metavar="NAME", help="write --data/NAME from --dataset, its runs and --judged")
    ap.add_argument("--dataset", type=Path, help="with --prepare: the (sampled) BEIR folder")
    ap.add_argument("--judged", default="", help="with --prepare: LABEL=FOLDER,... folders of `lab testset judge`")
    ap.add_argument("--depth", type=int, default=5, help="with --prepare: pool depth the judges were run with")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache"), help="with --prepare: lab's cache")
    args = ap.parse_args()
    if args.combine:
        run_combine(args.combine, args.json)
        return
    if args.sample is not None:
        if args.queries is None or args.out is None or args.queries < 1:
            fail("--sample needs --queries N (>= 1) and --out DIR")
        sample_population(args.sample, args.queries, args.seed, args.out)
        return
    if args.prepare:
        if args.dataset is None or not (args.dataset / "qrels" / "test.tsv").is_file():
            fail(f"--dataset {args.dataset}: needs a BEIR folder with qrels/test.tsv")
        judged = {}
        for item in filter(None, args.judged.split(",")):
            label, _, folder = item.partition("=")
            if not label or not folder:
                fail(f"--judged {item!r}: expected LABEL=FOLDER")
            judged[label] = Path(folder)
        prepare(args.prepare, args.dataset, judged, args.depth, args.data, args.cache_dir)
        return
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        fail(f"--sizes {args.sizes!r}: comma-separated integers, e.g. 30,60")
    if not sizes or min(sizes) < 10:
        fail(f"--sizes {args.sizes!r}: each size must be >= 10 (the fewest human-graded queries PPI accepts)")
    if args.subsets < 1:
        fail(f"--subsets {args.subsets}: must be >= 1")
    simulated = SIMULATED
    if args.smoke:
        args.subsets, sizes, simulated = 5, [min(sizes)], SIMULATED[1:2]
    names = [n for n in args.sets.split(",") if n] or sorted(p.name for p in args.data.iterdir() if p.is_dir())
    if not names:
        fail(f"--data {args.data}: no set folder (make one with --prepare)")
    t0 = time.perf_counter()
    results: dict = {"alpha": ALPHA, "k": K, "metric": "ndcg@10", "subsets": args.subsets, "sizes": sizes,
                     "seed": args.seed, "real": [], "simulated": []}
    for name in names:
        s = load_set(args.data / name)
        for label, grades in s.judges.items():
            for threshold in (JUDGE_RELEVANT, 3):
                name = label if threshold == JUDGE_RELEVANT else f"{label} (grade 3, post hoc)"
                r = study(s, name, judge_relevant(grades, threshold), sizes, args.subsets, args.seed)
                r.update(threshold=threshold)
                results["real"].append(r)
            # as a leaderboard scores a judged set: the grades as written (>= 1 relevant, gain = grade)
            as_written = {q: {d: g for (q2, d), g in grades.items() if q2 == q} for q in s.qids}
            graded = {r: per_query_under(s.runs[r], as_written, "ndcg@10", s.qids) for r in RUNS}
            r = study(s, f"{label} (grades as written)", judge_relevant(grades, 1), sizes, args.subsets, args.seed,
                      yhat=graded)
            r.update(threshold=1)
            results["real"].append(r)
        for i, (fn, fp) in enumerate(simulated):
            judged = simulated_judge(s, fn, fp, seed=args.seed * 1000 + i)
            r = study(s, f"simulated fn={fn} fp={fp}", judged, sizes, args.subsets, args.seed)
            r.update(fn=fn, fp=fp)
            results["simulated"].append(r)
    results["summary"] = summarise(results)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    print_tables(results)
    print(f"\n{args.subsets} subsets per size, seed {args.seed}, {results['seconds']} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
