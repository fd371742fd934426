"""Two graders and an arbiter: their agreement, their disagreements, and the qrels they agree on.

Input: an annotation sheet and two graders' copies of it (``lab testset grade SHEET --grader NAME`` writes
``<stem>.grader-NAME.csv``; any two filled copies of the same sheet will do), and optionally the arbiter's copy
(``--arbitrate``: ``<stem>.arbiter.csv``). Every file must hold the same (qid, unit_id) rows as the sheet.

Agreement (:func:`agreement`), on the pairs both graders graded (0-3): percent agreement (the share of equal
grades, with its Wilson 95 % interval), Cohen's kappa and weighted kappa (linear weights over 0-3: a 1-vs-2
disagreement costs a third of a 0-vs-3 one), each with n and a percentile bootstrap 95 % interval over the pairs
(lab.metrics.agreement, 1000 resamples, seed 0).

Merge (:func:`merge`): a pair both graded the same keeps that grade; a pair graded differently takes the arbiter's
grade, and stays out of the qrels (counted as ``unsettled``) while the arbiter has not graded it; a pair only one
grader graded stays out too (``one_grader``). Tiers: the graders' tier when they agree on it, else the arbiter's,
else none (core). Notes of all three are kept, each prefixed with its author.

:func:`import_graded` writes the merged grades as ``<stem>.agreed.csv`` (an annotation sheet) and imports it with
lab.testset.annotate.import_annotation; the set's ``provenance.json`` then gets ``agreement`` (the figures, the
graders, the counts and a one-line ``summary``, which lab.data.labels reads and the trust block shows), and the
import's MLflow run gets the figures as metrics and the summary as tag ``labels.graders`` (:func:`log_agreement`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from lab.core.errors import ConfigError
from lab.metrics.agreement import cohen_kappa, kappa_interval
from lab.metrics.stats import wilson_interval
from lab.testset.annotate import ANNOTATION_COLUMNS, import_annotation, meta_path
from lab.testset.grading import (
    ANNOTATION,
    Sheet,
    arbiter_path,
    grader_path,
    int_grade,
    read_sheet,
    same_rows,
)
from lab.testset.io import read_provenance, write_csv, write_provenance
from lab.tracking.store import client

GRADES = (0, 1, 2, 3)
RESAMPLES = 1000
#: How the weighted kappa weighs a disagreement (lab.metrics.agreement.WEIGHTS).
WEIGHTS = "linear"


def resolve_graders(sheet: str | Path, graders: str) -> list[Path]:
    """``--graders``: two grader names (files ``<stem>.grader-NAME.csv`` beside the sheet) or two CSV paths,
    comma-separated."""
    items = [g.strip() for g in graders.split(",") if g.strip()]
    if len(items) != 2:
        raise ConfigError(f"--graders {graders!r}: name two graders, e.g. --graders alice,bob (or two sheet files)")
    paths = [Path(g) if g.lower().endswith(".csv") else grader_path(sheet, g) for g in items]
    for g, p in zip(items, paths, strict=True):
        if not p.is_file():
            raise ConfigError(f"--graders: no file {p} for {g!r}; each grader grades with `lab testset grade "
                              f"{Path(sheet).name} --grader NAME` (or give the two filled sheets' paths)")
    if paths[0].resolve() == paths[1].resolve():
        raise ConfigError(f"--graders {graders!r}: the same file twice; name two graders")
    return paths


def grader_name(sheet: str | Path, path: Path) -> str:
    """A grader's name from their file (``<stem>.grader-NAME.csv``), else the file's stem."""
    prefix = f"{Path(sheet).stem}.grader-"
    return path.stem[len(prefix):] if path.stem.startswith(prefix) else path.stem


def _fig(value: float, n: int, ci: tuple[float, float], interval: str) -> dict[str, Any]:
    def num(x: float) -> float | None:
        return None if math.isnan(x) else float(x)

    return {"value": num(value), "n": n, "ci": None if math.isnan(ci[0]) else [float(ci[0]), float(ci[1])],
            "interval": interval}


def agreement(a: list[int], b: list[int], resamples: int = RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Percent agreement, Cohen's kappa and weighted kappa of two graders' grades on the same pairs (module
    docstring); each {value, n, ci, interval}, value / ci None when undefined."""
    n = len(a)
    same = sum(x == y for x, y in zip(a, b, strict=True))
    lo, hi = wilson_interval(same, n) if n else (math.nan, math.nan)
    boot = f"percentile bootstrap, {resamples} resamples of pairs"
    out = {"pairs": n, "percent_agreement": _fig(same / n if n else math.nan, n, (lo, hi), "wilson")}
    for key, w in (("kappa", None), ("weighted_kappa", WEIGHTS)):
        value = cohen_kappa(a, b, labels=GRADES, weights=w) if n else math.nan
        ci = kappa_interval(a, b, labels=GRADES, weights=w, n_resamples=resamples, seed=seed)
        out[key] = {**_fig(value, n, ci, boot), "weights": w}
    return out


def summary(agree: dict[str, Any], graders: int = 2) -> str:
    """"2 graders, kappa 0.71 [0.62, 0.79] on 180 pairs" (kappa n/a when undefined)."""
    k = agree["kappa"]
    if k["value"] is None:
        return f"{graders} graders, kappa n/a on {agree['pairs']} pairs"
    ci = f" [{k['ci'][0]:.2f}, {k['ci'][1]:.2f}]" if k["ci"] else ""
    return f"{graders} graders, kappa {k['value']:.2f}{ci} on {agree['pairs']} pairs"


def merge(a: Sheet, b: Sheet, arbiter: Sheet | None, names: tuple[str, str]) -> tuple[list[dict], dict[str, Any]]:
    """(rows of the agreed sheet, report) from two graders' sheets and the arbiter's (module docstring)."""
    arb = dict(zip(arbiter.keys(), arbiter.rows, strict=True)) if arbiter is not None else {}
    rb = dict(zip(b.keys(), b.rows, strict=True))
    rows, pairs_a, pairs_b, disagreements = [], [], [], []
    counts = {"agreed": 0, "arbitrated": 0, "unsettled": 0, "one_grader": 0, "ungraded": 0}
    for key, ra in zip(a.keys(), a.rows, strict=True):
        r2 = rb[key]
        ga, gb = int_grade(ra.get("grade", "")), int_grade(r2.get("grade", ""))
        ar = arb.get(key, {})
        grade, tier = None, ""
        if ga is not None and gb is not None:
            pairs_a.append(ga)
            pairs_b.append(gb)
            if ga == gb:
                counts["agreed"] += 1
                grade = ga
                ta, tb = ra.get("tier", "").strip(), r2.get("tier", "").strip()
                tier = ta if ta == tb else ar.get("tier", "").strip()
            else:
                g3 = int_grade(ar.get("grade", ""))
                disagreements.append({"qid": key[0], "unit_id": key[1], names[0]: ga, names[1]: gb, "arbiter": g3})
                if g3 is None:
                    counts["unsettled"] += 1
                else:
                    counts["arbitrated"] += 1
                    grade, tier = g3, ar.get("tier", "").strip()
        elif ga is None and gb is None:
            counts["ungraded"] += 1
        else:
            counts["one_grader"] += 1
        notes = [f"{who}: {r.get('note', '').strip()}" for who, r in ((names[0], ra), (names[1], r2), ("arbiter", ar))
                 if r.get("note", "").strip()]
        rows.append({"qid": key[0], "query": ra.get("query", ""), "unit_id": key[1], "passage": ra.get("passage", ""),
                     "grade": "" if grade is None else grade, "tier": tier if grade and grade >= 1 else "",
                     "note": "; ".join(notes)})
    return rows, {"graders": list(names), **counts, "disagreements": disagreements,
                  **agreement(pairs_a, pairs_b)}


def read_graders(sheet: str | Path, graders: str) -> tuple[Sheet, Sheet, Sheet | None, tuple[str, str]]:
    """The two graders' sheets and the arbiter's (None when there is none), each checked against the sheet's rows."""
    base = read_sheet(sheet)
    if base.kind != ANNOTATION:
        raise ConfigError(f"{base.path}: --graders works on an annotation sheet (export-annotation)")
    pa, pb = resolve_graders(sheet, graders)
    a, b = read_sheet(pa), read_sheet(pb)
    for s in (a, b):
        if s.kind != ANNOTATION:
            raise ConfigError(f"{s.path}: not an annotation sheet (a grader's copy of {base.path.name})")
    same_rows(base, a)
    same_rows(a, b)
    arb = None
    if arbiter_path(sheet).is_file():
        arb = read_sheet(arbiter_path(sheet))
        same_rows(base, arb)
    names = (grader_name(sheet, pa), grader_name(sheet, pb))
    if names[0] == names[1]:
        names = (pa.name, pb.name)
    return a, b, arb, names


def format_agreement(rep: dict[str, Any], limit: int = 20) -> list[str]:
    """The lines printed before any qrels are written: figures, counts, the disagreements (first ``limit``)."""
    na, nb = rep["graders"]

    def fig(name: str, f: dict) -> str:
        if f["value"] is None:
            return f"{name} n/a (n {f['n']})"
        ci = f" [{f['ci'][0]:.2f}, {f['ci'][1]:.2f}]" if f["ci"] else ""
        return f"{name} {f['value']:.2f}{ci} (n {f['n']})"

    lines = [f"graders {na} and {nb}: {rep['pairs']} pairs graded by both; "
             + "; ".join([fig("percent agreement", rep["percent_agreement"]), fig("Cohen's kappa", rep["kappa"]),
                          fig(f"weighted kappa ({WEIGHTS})", rep["weighted_kappa"])]) + " (95 % intervals)",
             f"agreed {rep['agreed']}, disagreed {len(rep['disagreements'])} (arbitrated {rep['arbitrated']}, "
             f"unsettled {rep['unsettled']}), graded by one grader only {rep['one_grader']}, by neither "
             f"{rep['ungraded']}"]
    if rep["disagreements"]:
        lines.append("disagreements (qid, unit: grades):")
        for d in rep["disagreements"][:limit]:
            arb = f", arbiter {d['arbiter']}" if d["arbiter"] is not None else ""
            lines.append(f"  {d['qid']}, {d['unit_id']}: {na} {d[na]}, {nb} {d[nb]}{arb}")
        if len(rep["disagreements"]) > limit:
            lines.append(f"  ... and {len(rep['disagreements']) - limit} more (--json lists them all)")
    if rep["unsettled"]:
        lines.append(f"warning: {rep['unsettled']} disagreements have no arbiter's grade and stay out of the qrels; "
                     f"a third person settles them with `lab testset grade SHEET --arbitrate`")
    return lines


def import_graded(sheet: str | Path, graders: str, out: str | Path, dataset=None, chunking=None, split: str = "test",
                  tracking_root: str | Path | None = "mlruns", experiment: str = "testset", progress: bool = False,
                  echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Agreement first (``echo``ed line by line), then the qrels of the agreed and arbitrated grades at ``out``
    (module docstring); returns import_annotation's report with ``agreement`` added."""
    sheet = Path(sheet)
    a, b, arb, names = read_graders(sheet, graders)
    rows, rep = merge(a, b, arb, names)
    rep["summary"] = summary(rep)
    for line in format_agreement(rep) if echo else []:
        echo(line)
    merged = sheet.with_name(f"{sheet.stem}.agreed{sheet.suffix or '.csv'}")
    write_csv(merged, ANNOTATION_COLUMNS, rows)
    meta = meta_path(sheet)
    if meta.is_file():  # the agreed sheet keeps the export's provenance (dataset, chunking, pool)
        meta_path(merged).write_bytes(meta.read_bytes())
    report = import_annotation(merged, out, dataset=dataset, chunking=chunking, split=split,
                               tracking_root=tracking_root, experiment=experiment, progress=progress)
    folder = Path(report["folder"])
    prov = read_provenance(folder)
    prov["agreement"] = {**rep, "files": [a.path.name, b.path.name] + ([arb.path.name] if arb else [])}
    write_provenance(folder, prov)
    if tracking_root is not None and report.get("mlflow_run_id"):
        log_agreement(report["mlflow_run_id"], rep, folder / "provenance.json", tracking_root)
    report["agreement"] = rep
    return report


def log_agreement(run_id: str, rep: dict[str, Any], provenance: Path, tracking_root: str | Path) -> None:
    """Add the agreement to the import's MLflow run: metrics graders_pairs, graders_percent_agreement,
    graders_kappa, graders_weighted_kappa (undefined ones left out), tag ``labels.graders`` (the summary), and the
    provenance.json that records it."""
    cl = client(tracking_root)
    metrics = {"graders_pairs": rep["pairs"], "graders_disagreements": len(rep["disagreements"]),
               "graders_unsettled": rep["unsettled"], "graders_percent_agreement": rep["percent_agreement"]["value"],
               "graders_kappa": rep["kappa"]["value"], "graders_weighted_kappa": rep["weighted_kappa"]["value"]}
    for key, value in metrics.items():
        if value is not None:
            cl.log_metric(run_id, key, float(value))
    cl.set_tag(run_id, "labels.graders", rep["summary"])
    cl.log_artifact(run_id, str(provenance), f"testset/{provenance.parent.name}")

