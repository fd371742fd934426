"""Annotation sheet: an annotation sheet of pooled candidates, and graded judgements with evidence tiers back as qrels.

Export (:func:`export_annotation`): every strategy named retrieves the top ``depth`` units for each query of
the split; the candidates are pooled (union, each unit once per query) and shuffled per query with
``random.Random(f"{seed}:{qid}")``, so neither the order nor any column tells the annotator which strategy
found a unit. Sheet columns (:data:`ANNOTATION_COLUMNS`): qid, query, unit_id, passage, then what the
annotator fills: grade (0-3: 0 not relevant, 1 partly, 2 relevant, 3 answers it fully; empty = not judged),
tier (core / auxiliary / edge, lab.metrics.ranking.DEFAULT_TIER_WEIGHTS: empty on a relevant row means core),
note. A side file ``<sheet>.meta.json`` keeps the dataset, chunking, strategies, depth, seed and which strategy
found which unit (for pool analysis after import; keep it away from annotators).

Import (:func:`import_annotation`): rows are validated first (unknown unit, a (qid, unit) pair twice, a grade
outside 0-3, an unknown tier, a tier on a row without a grade >= 1 are each a DataError naming file, line and
field). Judged rows become qrels (grade 0 rows too: judged not relevant), relevant rows' tiers go to
``tiers.json`` ({qid: {unit: tier}}, read by :func:`lab.testset.io.read_tiers`, for
``lab.metrics.evaluate(..., tiers=...)`` and its weighted_recall@k). A qid the dataset does not know becomes a
new query when its row has query text.
"""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

from lab.core.errors import ConfigError, DataError
from lab.retrievers.base import Context, build
from lab.testset.human_sample import (
    UNIFORM,
    Pilot,
    check_record_in,
    pilot_queries_needed,
    read_pilot,
    record_human_grades,
    uniform_sample,
)
from lab.testset.io import (
    TIERS,
    load_units,
    now_utc,
    parse_chunking,
    read_csv,
    unit_text,
    write_beir_set,
    write_csv,
    write_tiers,
)
from lab.testset.track import log_testset_run

ANNOTATION_COLUMNS = ("qid", "query", "unit_id", "passage", "grade", "tier", "note")


def meta_path(sheet: str | Path) -> Path:
    sheet = Path(sheet)
    return sheet.with_name(sheet.name + ".meta.json")


def pool_runs(runs: dict[str, object], depth: int) -> dict[str, dict[str, list[str]]]:
    """{qid: {unit id: [strategies that ranked it in their top depth]}} from {strategy: Run}."""
    pool: dict[str, dict[str, list[str]]] = {}
    for name, run in runs.items():
        for q in run:
            for d, _ in run.ranked(q, depth):
                pool.setdefault(q, {}).setdefault(d, []).append(name)
    return pool


def shuffled(units: Sequence[str], seed: int, qid: str) -> list[str]:
    """``units`` in a per-query seeded random order (sorted first, so the input order does not matter)."""
    out = sorted(units)
    random.Random(f"{seed}:{qid}").shuffle(out)
    return out


def export_annotation(dataset, out_csv: str | Path, strategies: Sequence[str] = ("bm25", "dense"), depth: int = 10,
                      split: str = "test", seed: int = 0, chunking=None, max_queries: int | None = None,
                      cache_dir: str | Path = ".cache", progress: bool = True,
                      tracking_root: str | Path | None = "mlruns", experiment: str = "testset",
                      pilot: Pilot | None = None) -> dict:
    """Write the annotation sheet and its ``.meta.json``; returns counts (queries, rows, pool sizes, overlap).
    ``max_queries`` (``--queries N``): a uniform random sample of N queries of the split (seeded; more than the
    split holds is a ConfigError). ``pilot`` (``--queries auto --pilot F``): people's grades on at least 10
    queries; the sample is as many new queries as the top two strategies' difference needs for a CI half-width of
    ``pilot.half_width`` (lab.testset.human_sample)."""
    if depth < 1 or not strategies:
        raise ConfigError("export-annotation needs --depth >= 1 and at least one strategy")
    t0 = time.perf_counter()
    units = load_units(dataset, chunking, progress=progress)
    if not units.dataset.qrels:  # a corpus alone (lab ingest); a split it lacks is Dataset.split's one-line error
        raise ConfigError(f"{units.dataset.path}: export-annotation pools candidates for each question of split "
                          f"{split!r}, and the folder has no questions; write questions first (lab testset "
                          "generate / import-logs), then export their pool")
    queries, judge_qrels = units.dataset.split(split)
    if max_queries and max_queries > len(queries):
        raise ConfigError(f"--queries {max_queries}: split {split!r} of {units.dataset.name} has {len(queries)} "
                          f"queries; draw at most {len(queries)}")
    pilot_qrels = read_pilot(pilot.path, list(queries)) if pilot is not None else None  # checked before any work
    sample_info: dict = {}
    if max_queries:
        queries = queries.subset(uniform_sample(list(queries), max_queries, seed))
        sample_info = {"sample": UNIFORM, "sampled_queries": list(queries)}
    ctx = Context(cache_dir=Path(cache_dir), progress=progress, seed=seed)
    runs = {}
    for name in dict.fromkeys(strategies):
        r = build(name, {}, ctx)
        r.index(units.corpus)
        runs[name] = r.search_batch(queries, depth if pilot_qrels is None else max(depth, 10))
    if pilot is not None and pilot_qrels is not None:  # --queries auto: size the sample, draw new queries only
        sizing = pilot_queries_needed(runs, judge_qrels, pilot_qrels, list(queries), half_width=pilot.half_width)
        fresh = [q for q in queries if q not in pilot_qrels]
        more = len(fresh) if sizing["more"] is None else min(sizing["more"], len(fresh))
        queries = queries.subset(uniform_sample(fresh, more, seed))
        sample_info = {"sample": UNIFORM, "sampled_queries": list(queries), "pilot": {**sizing,
                       "half_width": pilot.half_width, "pilot_queries": sorted(pilot_qrels)}}
    pool = pool_runs(runs, depth)
    rows = []
    for q in queries:
        for u in shuffled(pool.get(q, {}), seed, q):
            rows.append({"qid": q, "query": queries[q], "unit_id": u, "passage": unit_text(units.corpus[u]),
                         "grade": "", "tier": "", "note": ""})
    path = write_csv(out_csv, ANNOTATION_COLUMNS, rows)
    sizes = [len(pool.get(q, {})) for q in queries]
    shared = sum(1 for q in queries for s in pool.get(q, {}).values() if len(s) > 1)
    counts = {"queries": len(queries), "rows": len(rows), "pool_mean": sum(sizes) / max(1, len(sizes)),
              "pool_max": max(sizes, default=0), "found_by_several": shared,
              "found_by_several_share": shared / max(1, len(rows))}
    meta = {"kind": "annotation-sheet", "created": now_utc(), "dataset": str(units.dataset.path),
            "chunking_spec": parse_chunking(chunking), "units": units.describe(), "split": split,
            "strategies": list(runs), "depth": depth, "seed": seed, "max_queries": max_queries, **sample_info,
            "columns": list(ANNOTATION_COLUMNS), "counts": counts, "pool": pool,
            "seconds": round(time.perf_counter() - t0, 1)}
    meta_path(path).write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if tracking_root is not None:
        meta["mlflow_run_id"] = log_testset_run(
            "annotation-export", f"annotation sheet {units.dataset.name} ({'+'.join(runs)}, depth {depth})",
            {"dataset": units.dataset.name, "strategies": list(runs), "depth": depth, "split": split, "seed": seed,
             "chunking": units.chunking, "max_queries": max_queries}, counts,
            {"dataset": units.dataset.name, "dataset_fingerprint": meta["units"]["source_fingerprint"]},
            [path, meta_path(path)], tracking_root=tracking_root, experiment=experiment)
        meta_path(path).write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return {**counts, "path": str(path), "meta": str(meta_path(path)), "mlflow_run_id": meta.get("mlflow_run_id"),
            **({"pilot": sample_info["pilot"]} if "pilot" in sample_info else {})}


def read_annotation(path: str | Path, units_corpus, known_queries) -> list[dict]:
    """Validated rows ``{line, qid, query, unit_id, grade (int | None), tier (str | None), note}``."""
    path = Path(path)
    out, seen = [], {}
    for line, rec in read_csv(path, required=("qid", "unit_id", "grade"), what="annotation sheet"):
        qid, unit = rec["qid"].strip(), rec["unit_id"].strip()
        if not qid:
            raise DataError(path, "empty qid", line=line, field="qid", hint="do not edit the qid column")
        if qid not in known_queries and not rec.get("query", "").strip():
            raise DataError(path, f"qid {qid!r} is not a query of the dataset and the row has no query text",
                            line=line, field="query", hint="write the query text for a new query")
        if unit not in units_corpus:
            raise DataError(path, f"unit {unit!r} is not in the corpus", line=line, field="unit_id",
                            hint="do not edit unit_id; import with the dataset and chunking the sheet was made from")
        if (qid, unit) in seen:
            raise DataError(path, f"({qid!r}, {unit!r}) judged twice (first on line {seen[qid, unit]})", line=line,
                            field="unit_id", hint="keep one row per query and unit")
        seen[qid, unit] = line
        raw, grade = rec.get("grade", "").strip(), None
        if raw:
            try:
                grade = int(float(raw)) if float(raw).is_integer() else -1
            except ValueError:
                grade = -1
            if not 0 <= grade <= 3:
                raise DataError(path, f"grade {raw!r} is not an integer from 0 to 3", line=line, field="grade",
                                hint="0 not relevant, 1 partly, 2 relevant, 3 answers it fully; empty = not judged")
        tier = rec.get("tier", "").strip().lower() or None
        if tier is not None:
            if tier not in TIERS:
                raise DataError(path, f"tier {rec.get('tier')!r} is not one of {', '.join(TIERS)}", line=line,
                                field="tier", hint="empty means core on a relevant row")
            if grade is None or grade < 1:
                raise DataError(path, f"tier {tier!r} on a row without a grade >= 1", line=line, field="tier",
                                hint="tiers qualify relevant units: give a grade 1-3, or clear the tier")
        out.append({"line": line, "qid": qid, "query": rec.get("query", "").strip(), "unit_id": unit,
                    "grade": grade, "tier": tier, "note": rec.get("note", "").strip()})
    return out


def import_annotation(sheet: str | Path, out: str | Path, dataset=None, chunking=None, split: str = "test",
                      tracking_root: str | Path | None = "mlruns", experiment: str = "testset",
                      progress: bool = False, record_in: str | Path | None = None) -> dict:
    """Turn a filled sheet into a BEIR set with graded qrels and ``tiers.json`` at ``out``; returns the report.
    ``dataset`` / ``chunking`` default to those in the sheet's ``.meta.json``. ``record_in``: also keep people's
    grades of the queries graded in full in that (judged) set, for ``lab compare --dataset``
    (lab.testset.human_sample.record_human_grades)."""
    sheet = Path(sheet)
    meta = json.loads(meta_path(sheet).read_text(encoding="utf-8")) if meta_path(sheet).is_file() else {}
    dataset = dataset or meta.get("dataset")
    if dataset is None:
        raise ConfigError(f"{sheet}: no {meta_path(sheet).name} next to it; pass --dataset (and --chunking) of the "
                          "dataset the sheet was exported from")
    units = load_units(dataset, chunking if chunking is not None else meta.get("chunking_spec"), progress=progress)
    ds = units.dataset
    rows = read_annotation(sheet, units.corpus, ds.queries)
    qrels: dict[str, dict[str, int]] = {}
    tiers: dict[str, dict[str, str]] = {}
    texts: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    for r in rows:
        if r["grade"] is None:
            continue
        q = r["qid"]
        texts.setdefault(q, ds.queries[q] if q in ds.queries else r["query"])
        qrels.setdefault(q, {})[r["unit_id"]] = r["grade"]
        if r["grade"] >= 1:
            tiers.setdefault(q, {})[r["unit_id"]] = r["tier"] or "core"
        if r["note"]:
            notes.setdefault(q, []).append(f"{r['unit_id']}: {r['note']}")
    if not qrels:
        raise DataError(sheet, "no row has a grade", hint="fill the grade column (0-3) of the rows you judged")
    human_grades = graded_in_full(sheet, rows, meta, split)
    if record_in is not None:  # checked before anything is written
        check_record_in(record_in, human_grades["graded_queries"], split)
    queries = {q: (t, {**dict(ds.queries.metadata.get(q, {})), **({"annotation_notes": notes[q]} if q in notes
                                                                  else {})})
               for q, t in texts.items()}
    grades = Counter(r["grade"] for r in rows if r["grade"] is not None)
    tier_counts = Counter(t for d in tiers.values() for t in d.values())
    report = {"rows": len(rows), "judged": sum(grades.values()), "unjudged": sum(r["grade"] is None for r in rows),
              "queries": len(qrels), "queries_without_relevant": sum(1 for d in qrels.values() if max(d.values()) < 1),
              "grades": {str(g): grades.get(g, 0) for g in range(4)},
              "tiers": {t: tier_counts.get(t, 0) for t in ("core", "auxiliary", "edge")}}
    pool = meta.get("pool") or {}
    if pool:
        for s in meta.get("strategies", []):
            found = [(q, u) for q, d in tiers.items() for u in d if s in pool.get(q, {}).get(u, [])]
            only = [(q, u) for q, u in found if pool[q][u] == [s]]
            report[f"relevant_found_by_{s}"] = len(found)
            report[f"relevant_found_only_by_{s}"] = len(only)
    if split in ds.qrels:
        old = ds.qrels[split]
        pairs = [(q, u) for q, d in qrels.items() for u in d if q in old and u in old[q]]
        agree = sum((qrels[q][u] >= 1) == (old[q][u] >= 1) for q, u in pairs)
        report["existing_qrels_pairs_judged"] = len(pairs)
        report["existing_qrels_agreement"] = agree / len(pairs) if pairs else None
    provenance = {"kind": "annotation", "created": now_utc(), "sheet": str(sheet),
                  "sheet_meta": {k: v for k, v in meta.items() if k != "pool"}, "units": units.describe(),
                  "report": report, "human_grades": human_grades}
    folder = write_beir_set(out, units.corpus, queries, qrels, provenance, split=split)
    write_tiers(folder, tiers)
    if record_in is not None:
        report["recorded_in"] = str(record_human_grades(record_in, qrels, human_grades, split))
    if tracking_root is not None:
        flat = {k: v for k, v in report.items() if isinstance(v, (int, float)) and v is not None}
        flat.update({f"grade_{g}": n for g, n in report["grades"].items()})
        flat.update({f"tier_{t}": n for t, n in report["tiers"].items()})
        report["mlflow_run_id"] = log_testset_run(
            "annotation-import", f"annotation import {ds.name} ({report['judged']} judged)",
            {"sheet": sheet.name, "dataset": ds.name, "split": split, "chunking": units.chunking}, flat,
            {"dataset": ds.name, "dataset_fingerprint": provenance["units"]["source_fingerprint"]},
            [folder], tracking_root=tracking_root, experiment=experiment)
    report["folder"] = str(folder)
    report["graded_queries"] = len(human_grades["graded_queries"])
    return report


def graded_in_full(sheet: Path, rows: Sequence[dict], meta: dict, split: str) -> dict:
    """The provenance record of which queries people graded in full (every sheet row of the query graded):
    ``{graded_queries, sample, sample_seed, split, not_graded}``. ``sample`` is "uniform" when the sheet holds a
    seeded uniform sample (``export-annotation --queries``), else "unknown". A query of such a sample with some rows
    graded and others not is a DataError at its first ungraded row; one with no row graded is listed in
    ``not_graded`` (the graded rest is then no longer the whole sample)."""
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(r["qid"], []).append(r)
    sampled = meta.get("sampled_queries")
    full, none = [], []
    for q, rs in by_q.items():
        missing = [r for r in rs if r["grade"] is None]
        if not missing:
            full.append(q)
        elif len(missing) == len(rs):
            none.append(q)
        elif sampled is not None and q in sampled:
            raise DataError(sheet, f"query {q!r} is in the sheet's random sample, so it counts as graded in full, "
                                   f"but {len(missing)} of its {len(rs)} rows have no grade", line=missing[0]["line"],
                            field="grade", hint="grade every row of a sampled query (0 when not relevant)")
    return {"graded_queries": full, "sample": meta.get("sample") or "unknown", "sample_seed": meta.get("seed"),
            "split": split, "not_graded": none}
