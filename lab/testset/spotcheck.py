"""Spot check of a test set by people: export a seeded sample as a spreadsheet, import the verdicts back.

Sheet columns (:data:`REVIEW_COLUMNS`): ``qid``, ``unit_id`` (the judged unit: the query's best-graded one),
``passage`` (for generated questions exactly the passage the model saw, ``metadata.passage``; else that unit's
text), ``evidence`` (the text of the question's evidence span, when the set has one), ``question``, ``answer``,
then what the reviewer fills: ``verdict`` (keep /
fix / drop; empty = not reviewed), ``fixed_question`` (required for fix), ``grade`` (0-3; prefilled with the
current grade, a change rewrites that qrel), ``note`` (free text, kept in the query's metadata).

Import (:func:`import_review`) validates every row before changing anything: unknown qid, a qid twice, a bad
verdict, fix without a fixed question, a grade outside 0-3 are each a DataError naming file, line and field.
Then: drop removes the query and its qrels, fix replaces the question text (the original is kept in
``metadata.original_question``), grade changes the qrel of (qid, unit_id). Verdicts are recorded in each
reviewed query's ``metadata.review``, and the review (counts, file sha256) appended to ``provenance.json``.

Report: acceptance rate = (keep + fix) / reviewed, with a Wilson 95 % interval; and the precision the set gives
a metric: a real run (``ci_strategy``, default bm25) on the reviewed set, its per-query recall@10, the 95 % CI of
lab.metrics.stats.bootstrap_ci (percentile bootstrap, 1000 resamples, seeded; the Wilson interval when every
query scores 0 or 1, so a small all-hit set does not get a zero-width interval) and its half-width, that
half-width projected to 2,000 questions (Wilson at the observed rate for 0/1 scores, else times sqrt(n / 2000)),
and the questions needed for a target half-width (default +/-0.02; lab.metrics.stats.questions_needed).
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
from pathlib import Path

from lab.core.errors import ConfigError, DataError
from lab.core.paths import public_paths_in
from lab.data.beir import load_dataset
from lab.data.fingerprint import fingerprint
from lab.experiment.run import run_experiment
from lab.metrics import bootstrap_ci
from lab.metrics.stats import CI_RESAMPLES, questions_needed, wilson_interval  # noqa: F401  wilson_interval re-exported
from lab.retrievers.base import Context
from lab.testset.io import now_utc, read_csv, read_provenance, unit_text, write_csv, write_jsonl, write_provenance
from lab.testset.track import log_testset_run

REVIEW_COLUMNS = ("qid", "unit_id", "passage", "evidence", "question", "answer", "verdict", "fixed_question", "grade",
                  "note")
#: The half-width a test set is usually sized for (+/-2 points of Recall@10).
TARGET_HALF_WIDTH = 0.02
VERDICTS = ("keep", "fix", "drop")


def _best_unit(qrels_of_q: dict[str, int]) -> str:
    """The unit a reviewer judges for a query: highest grade, then id order."""
    return sorted(qrels_of_q.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def export_review(set_dir: str | Path, out_csv: str | Path, sample: int = 50, seed: int = 0,
                  split: str = "test") -> dict:
    """Write a review sheet for ``sample`` queries of ``split`` drawn with ``random.Random(seed)`` (all when the
    split has fewer), in query-id order. Returns {"rows", "path", "qids"}."""
    ds = load_dataset(set_dir, splits=[split], progress=False)
    queries, qrels = ds.split(split)
    qids = sorted(qrels.query_ids)
    if sample < 1:
        raise ConfigError(f"--sample {sample}: review at least one question")
    picked = sorted(random.Random(seed).sample(qids, min(sample, len(qids))))
    spans = {}
    for e in ds.evidence:
        spans.setdefault((e.query_id, e.doc_id), []).append((e.start, e.end))
    rows = []
    for q in picked:
        unit = _best_unit(qrels[q])
        meta = queries.metadata.get(q, {})
        doc = ds.corpus[unit] if unit in ds.corpus else None
        passage = meta.get("passage") if isinstance(meta.get("passage"), str) else (unit_text(doc) if doc else "")
        evidence = " [...] ".join(doc.text[s:e] for s, e in sorted(spans.get((q, unit), []))) if doc else ""
        rows.append({"qid": q, "unit_id": unit, "passage": passage, "evidence": evidence,
                     "question": queries[q], "answer": meta.get("answer", ""), "verdict": "", "fixed_question": "",
                     "grade": qrels[q][unit], "note": ""})
    path = write_csv(out_csv, REVIEW_COLUMNS, rows)
    return {"rows": len(rows), "path": str(path), "qids": picked, "seed": seed, "of": len(qids)}


def read_review(path: str | Path, known: dict[str, dict[str, int]]) -> list[dict]:
    """Validated review rows ``{line, qid, unit_id, verdict, fixed_question, grade (int | None), note}``;
    ``known``: the set's qrels (qid -> {unit: grade}). See module docstring for what is an error."""
    path = Path(path)
    out, seen = [], {}
    for line, rec in read_csv(path, required=("qid", "verdict"), what="review sheet"):
        qid = rec.get("qid", "").strip()
        if not qid:
            raise DataError(path, "empty qid", line=line, field="qid", hint="do not edit the qid column")
        if qid not in known:
            raise DataError(path, f"qid {qid!r} is not a query of the set", line=line, field="qid",
                            hint="do not edit the qid column; import the sheet into the set it was exported from")
        if qid in seen:
            raise DataError(path, f"qid {qid!r} appears twice (first on line {seen[qid]})", line=line, field="qid",
                            hint="keep one row per question")
        seen[qid] = line
        verdict = rec.get("verdict", "").strip().lower()
        if verdict not in VERDICTS + ("",):
            raise DataError(path, f"verdict {rec.get('verdict')!r} is not one of {', '.join(VERDICTS)} (or empty "
                                  "for not reviewed)", line=line, field="verdict")
        fixed = " ".join(rec.get("fixed_question", "").split())
        if verdict == "fix" and not fixed:
            raise DataError(path, "verdict 'fix' without a fixed_question", line=line, field="fixed_question",
                            hint="write the corrected question, or use keep / drop")
        unit = rec.get("unit_id", "").strip() or _best_unit(known[qid])
        raw_grade = rec.get("grade", "").strip()
        grade = None
        if raw_grade:
            try:
                grade = int(float(raw_grade)) if float(raw_grade).is_integer() else None
            except ValueError:
                grade = None
            if grade is None or not 0 <= grade <= 3:
                raise DataError(path, f"grade {raw_grade!r} is not an integer from 0 to 3", line=line, field="grade",
                                hint="0 not relevant, 1 relevant, 2 highly relevant, 3 perfect; empty keeps it")
        out.append({"line": line, "qid": qid, "unit_id": unit, "verdict": verdict, "fixed_question": fixed,
                    "grade": grade, "note": rec.get("note", "").strip()})
    return out


def ci_halfwidth(set_dir: str | Path, strategy: str = "bm25", metric: str = "recall@10", split: str = "test",
                 seed: int = 0, n_resamples: int = CI_RESAMPLES, cache_dir: str | Path = ".cache",
                 progress: bool = False, target_half_width: float = TARGET_HALF_WIDTH) -> dict:
    """The CI of ``metric`` that a real ``strategy`` run gives on the set (see module docstring), its half-width,
    the half-width projected to 2,000 questions and the questions needed for ``target_half_width``."""
    ctx = Context(cache_dir=Path(cache_dir), progress=progress, seed=seed)
    res = run_experiment(str(set_dir), strategy, {}, split=split, k=100, metrics=[metric], ctx=ctx)
    table = bootstrap_ci(res.evaluation.per_query[[metric]], n_resamples=n_resamples, seed=seed)
    ci = table.iloc[0]
    interval = table.attrs.get("interval", {}).get(metric, "percentile bootstrap")
    values = res.evaluation.per_query[metric].to_numpy(dtype=float)
    n = res.evaluation.n_queries
    half = (float(ci.ci_high) - float(ci.ci_low)) / 2
    if interval == "wilson":
        lo, hi = wilson_interval(round(float(ci["mean"]) * 2000), 2000)
        at_2000 = (hi - lo) / 2
    else:
        at_2000 = half * math.sqrt(n / 2000)
    return {"strategy": strategy, "metric": metric, "n_queries": n, "mean": float(ci["mean"]),
            "ci_low": float(ci.ci_low), "ci_high": float(ci.ci_high), "interval": interval, "half_width": half,
            "half_width_at_2000": at_2000, "target_half_width": target_half_width,
            "questions_needed": questions_needed(values, target_half_width), "n_resamples": n_resamples,
            "seed": seed}


def import_review(set_dir: str | Path, review_csv: str | Path, out: str | Path | None = None, split: str = "test",
                  ci_strategy: str | None = "bm25", seed: int = 0, cache_dir: str | Path = ".cache",
                  progress: bool = False, tracking_root: str | Path | None = "mlruns",
                  experiment: str = "testset", target_half_width: float = TARGET_HALF_WIDTH) -> dict:
    """Apply a filled review sheet to a set (``out`` None: in place; else a copy at ``out``); returns the report."""
    set_dir, review_csv = Path(set_dir), Path(review_csv)
    ds = load_dataset(set_dir, progress=False)
    if split not in ds.qrels:
        raise DataError(set_dir / "qrels", f"no qrels for split {split!r}; available: {sorted(ds.qrels)}")
    qrels = {q: dict(d) for q, d in ds.qrels[split].qrels.items()}
    rows = read_review(review_csv, qrels)  # every row checked before anything is written
    for r in rows:
        if r["unit_id"] not in qrels[r["qid"]]:
            raise DataError(review_csv, f"unit {r['unit_id']!r} is not judged for query {r['qid']!r}", line=r["line"],
                            field="unit_id", hint="do not edit the unit_id column")
    source_qrels = next(p for p in (set_dir / "qrels").iterdir() if p.stem == split)
    if source_qrels.suffix != ".tsv":
        raise ConfigError(f"{source_qrels}: only BEIR .tsv qrels are rewritten; convert the set's qrels first")
    target = set_dir if out is None else Path(out)
    if out is not None and target.resolve() != set_dir.resolve():
        if target.exists():
            raise ConfigError(f"{target} exists; choose a new folder for the reviewed set, or omit --out to "
                              "update the set in place")
        shutil.copytree(set_dir, target)

    texts, meta = dict(ds.queries.texts), {q: dict(m) for q, m in ds.queries.metadata.items()}
    counts = dict.fromkeys(VERDICTS, 0)
    counts.update(unreviewed=0, grade_changes=0)
    for r in rows:
        q = r["qid"]
        if r["grade"] is not None and r["verdict"] != "drop" and r["grade"] != qrels[q][r["unit_id"]]:
            qrels[q][r["unit_id"]] = r["grade"]
            counts["grade_changes"] += 1
        if not r["verdict"]:
            counts["unreviewed"] += 1
            continue
        counts[r["verdict"]] += 1
        m = meta.setdefault(q, {})
        m["review"] = r["verdict"]
        if r["note"]:
            m["review_note"] = r["note"]
        if r["verdict"] == "fix":
            m.setdefault("original_question", texts[q])
            texts[q] = r["fixed_question"]
        elif r["verdict"] == "drop":
            qrels.pop(q, None)
            texts.pop(q, None)
            meta.pop(q, None)
    write_jsonl(target / "queries.jsonl", ({"_id": q, "text": t, **({"metadata": meta[q]} if meta.get(q) else {})}
                                           for q, t in texts.items()))
    with open(target / "qrels" / source_qrels.name, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q, docs in qrels.items():
            for d, g in docs.items():
                fh.write(f"{q}\t{d}\t{g}\n")

    reviewed = sum(counts[v] for v in VERDICTS)
    accepted = counts["keep"] + counts["fix"]
    lo, hi = wilson_interval(accepted, reviewed)
    report = {"reviewed": reviewed, **counts, "acceptance_rate": accepted / reviewed if reviewed else None,
              "acceptance_ci95": [lo, hi], "keep_rate": counts["keep"] / reviewed if reviewed else None,
              "queries_after": len(qrels), "folder": str(target), "review_file": str(review_csv),
              "review_sha256": hashlib.sha256(review_csv.read_bytes()).hexdigest()[:16]}
    if ci_strategy:
        report["ci"] = ci_halfwidth(target, ci_strategy, split=split, seed=seed, cache_dir=cache_dir,
                                    progress=progress, target_half_width=target_half_width)
    prov = read_provenance(target)
    entry = {"date": now_utc(), **{k: v for k, v in report.items() if k != "folder"}}
    prov.setdefault("reviews", []).append(public_paths_in(entry))  # the review file's path without a machine prefix
    write_provenance(target, prov)
    if tracking_root is not None:
        metrics = {k: report[k] for k in ("reviewed", "keep", "fix", "drop", "unreviewed", "grade_changes",
                                          "queries_after")}
        metrics.update(acceptance_rate=report["acceptance_rate"], acceptance_ci95_low=lo, acceptance_ci95_high=hi)
        if "ci" in report:
            c = report["ci"]
            metrics.update({f"{c['metric']}": c["mean"], f"{c['metric']}_ci_low": c["ci_low"],
                            f"{c['metric']}_ci_high": c["ci_high"], f"{c['metric']}_ci_half_width": c["half_width"],
                            f"{c['metric']}_ci_half_width_at_2000": c["half_width_at_2000"],
                            f"{c['metric']}_questions_needed": c["questions_needed"]})
        run_id = log_testset_run("review", f"review {set_dir.name} ({reviewed} reviewed)",
                                 {"set": str(set_dir), "out": str(target), "split": split, "ci_strategy": ci_strategy,
                                  "seed": seed}, metrics,
                                 {"testset_fingerprint": fingerprint(target), "dataset": ds.name},
                                 [review_csv, target / "provenance.json"], tracking_root=tracking_root,
                                 experiment=experiment)
        report["mlflow_run_id"] = run_id
        prov["reviews"][-1]["mlflow_run_id"] = run_id
        write_provenance(target, prov)
    return report


def format_report(report: dict) -> str:
    acc = report["acceptance_rate"]
    lines = [f"reviewed {report['reviewed']} (keep {report['keep']}, fix {report['fix']}, drop {report['drop']}; "
             f"{report['unreviewed']} rows left empty), grade changes {report['grade_changes']}",
             "acceptance rate " + ("n/a" if acc is None else
                                   f"{acc:.1%} (Wilson 95% {report['acceptance_ci95'][0]:.1%}-"
                                   f"{report['acceptance_ci95'][1]:.1%})")
             + f"; {report['queries_after']} questions in {report['folder']}"]
    c = report.get("ci")
    if c:
        how = "Wilson" if c.get("interval") == "wilson" else "bootstrap"
        lines.append(f"{c['metric']} of {c['strategy']}: {c['mean']:.4f} [{c['ci_low']:.4f}, {c['ci_high']:.4f}] "
                     f"({how} 95%) over {c['n_queries']} questions: +/-{c['half_width']:.4f}; projected to 2,000 "
                     f"questions +/-{c['half_width_at_2000']:.4f}; about {c['questions_needed']:,} questions "
                     f"give +/-{c['target_half_width']:g}")
    return "\n".join(lines)


def to_json(report: dict) -> str:
    return json.dumps(report, indent=1, ensure_ascii=False, default=str)
