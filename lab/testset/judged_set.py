"""A judged set on disk: the qrels with their provenance sidecar (which labels are human, generated or judged), the
judge report, the judge's provenance, and the MLflow run of ``lab testset judge``; plus the report in words and the
judge's agreement with an annotation sheet."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from lab.core.atomic import write_text_atomic
from lab.core.errors import DataError, LabError
from lab.core.paths import public_paths_in
from lab.data.beir import qrels_files
from lab.data.fingerprint import fingerprint
from lab.metrics.agreement import cohen_kappa, kappa_interval
from lab.metrics.stats import wilson_interval
from lab.testset.io import PROVENANCE, read_provenance
from lab.testset.judge_config import JudgeConfig
from lab.testset.judgecheck import below_floor
from lab.testset.track import log_testset_run
from lab.testset.umbrela import GRADES, PROMPT_VERSION, prompt_sha256

REPORT = "judge_report.json"


def label_sources(folder: str | Path, split: str, qrels: dict[str, dict[str, int]]) -> dict[tuple[str, str], str]:
    """(qid, doc id) -> "generated" | "human" | "judged" for the labels a set already has (module docstring)."""
    folder = Path(folder)
    out: dict[tuple[str, str], str] = {}
    side = sidecar_path(folder, split)
    if side.is_file():
        for line, rec in enumerate(side.read_text(encoding="utf-8").splitlines(), 1):
            if not rec.strip():
                continue
            try:
                obj = json.loads(rec)
                out[str(obj["query_id"]), str(obj["doc_id"])] = str(obj["source"])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise DataError(side, f"not a provenance record ({e})", line=line, field="source",
                                hint="each line is {query_id, doc_id, grade, source}; delete the file to start over"
                                ) from None
    default = "generated" if read_provenance(folder).get("kind") in ("generated", "logs") else "human"
    return {(q, d): out.get((q, d), default) for q, docs in qrels.items() for d in docs}


def sidecar_path(folder: str | Path, split: str) -> Path:
    return Path(folder) / "qrels" / f"{split}.provenance.jsonl"


def write_judged_set(src: Path, out, ds, cfg: JudgeConfig, new: dict, sources: dict, judged: dict,
                     identity: str) -> Path:
    """Write the judged set: a copy of the dataset folder at ``out`` (replaced) or the folder itself, with the
    split's qrels (every label, old and new) and their sidecar; returns the folder."""
    folder = Path(out) if out is not None else src
    if out is not None:
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(src, folder, ignore=shutil.ignore_patterns(".*"))
    full = {q: dict(d) for q, d in ds.qrels[cfg.split].qrels.items()}
    for q, docs in new.items():
        full.setdefault(q, {}).update({d: g for d, g in docs.items() if d not in full.get(q, {})})
    write_qrels(folder, cfg.split, full, {**label_sources(src, cfg.split, full), **sources}, judged, identity)
    return folder


def write_report(folder: Path, meta: dict) -> None:
    """The judge report, its absolute paths (source dataset, folder, annotation file) made public."""
    text = json.dumps(public_paths_in(meta), indent=1, ensure_ascii=False, default=str) + "\n"
    (folder / REPORT).write_text(text, encoding="utf-8")


def log_judge_run(meta: dict, ds, src: Path, folder: Path, cfg: JudgeConfig, in_place: bool, force: bool,
                   tracking_root, experiment: str) -> str:
    """The MLflow run of a judging (lab.testset.track.log_testset_run): settings as params, the report's figures,
    the card's and each strategy's score changes as metrics, the report, qrels and sidecar as artifacts."""
    report, usage, runs = meta["report"], meta["llm_usage"], meta["strategies"]
    flat = {k2: v for k2, v in report.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    flat.update({f"judge_grade_{g}": n for g, n in report["judge_grades"].items()})
    flat.update({f"{s}.{m}": v for s, row in report["strategies"].items() for m, v in row.items()})
    flat.update({f"agreement.{m}": v for m, v in (report.get("human_agreement") or {}).items()
                 if isinstance(v, (int, float)) and v is not None and not (isinstance(v, float) and math.isnan(v))})
    flat.update({"seconds": meta["seconds"], "judge_seconds": meta["judge_seconds"],
                 **{f"llm_{k2}": v for k2, v in usage.items()}})
    flat.update(card_metrics(meta["judge_card"]))
    return log_testset_run(
        "judge", f"judge {ds.name} ({'+'.join(runs)}, depth {cfg.depth})",
        {"dataset": ds.name, "split": cfg.split, "strategies": list(runs), "depth": cfg.depth,
         "max_queries": cfg.max_queries, "judge": meta["judge"], "prompt_version": PROMPT_VERSION,
         "prompt_sha256": prompt_sha256(), "grammar": cfg.grammar, "max_tokens": cfg.max_tokens,
         "max_passage_chars": cfg.max_passage_chars, "seed": cfg.seed, "in_place": bool(in_place),
         "check_pairs": cfg.check_pairs, "min_kappa": cfg.min_kappa, "force": bool(force)}, flat,
        {"dataset": ds.name, "dataset_fingerprint": fingerprint(src)},
        [folder / REPORT, folder / "qrels" / f"{cfg.split}.tsv", sidecar_path(folder, cfg.split)],
        tracking_root=tracking_root, experiment=experiment)


def card_metrics(card: dict | None) -> dict:
    """The card's figures as flat MLflow metrics (``card.kappa``, ``card.recall_of_positives``, ...)."""
    if not card:
        return {}
    rows = {"kappa": card["kappa"], "weighted_kappa": card["weighted_kappa"],
            "recall_of_positives": card["recall_of_positives"], "false_positive_rate": card["false_positive_rate"],
            "consistency": card["consistency"],
            **{f"{k}_false_positive_rate": v["false_positive_rate"] for k, v in card["stress"].items()}}
    return {f"card.{name}": fig["value"] for name, fig in rows.items() if fig["value"] is not None}


def write_judge_provenance(folder: Path, identity: str, card: dict | None) -> None:
    """Add ``"judge": {identity, prompt_version[, card, summary]}`` to the set's ``provenance.json`` (written
    atomically; the file's other keys are kept)."""
    prov = read_provenance(folder)
    entry = {"identity": identity, "prompt_version": PROMPT_VERSION}
    if card is not None:
        entry.update(card=card, summary=card["summary"])
    prov["judge"] = entry
    write_text_atomic(Path(folder) / PROVENANCE, json.dumps(prov, indent=1, ensure_ascii=False, default=str) + "\n")


def write_qrels(folder: Path, split: str, qrels: dict[str, dict[str, int]], sources: dict, judged: dict,
                 identity: str) -> None:
    """``qrels/<split>.tsv`` (BEIR tsv, header) and its provenance sidecar, rows in the same order."""
    qdir = folder / "qrels"
    qdir.mkdir(parents=True, exist_ok=True)
    try:
        existing = qrels_files(folder).get(split)
    except LabError:
        existing = None
    path = qdir / f"{split}.tsv"
    if existing is not None and existing != path:
        existing.unlink()  # a TREC-format qrels file of the split is replaced by the BEIR tsv
    with open(path, "w", encoding="utf-8", newline="\n") as fh, \
            open(sidecar_path(folder, split), "w", encoding="utf-8", newline="\n") as side:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q, docs in qrels.items():
            for d, g in docs.items():
                fh.write(f"{q}\t{d}\t{int(g)}\n")
                rec = {"query_id": q, "doc_id": d, "grade": int(g), "source": sources.get((q, d), "human")}
                if (q, d) in judged:
                    rec.update({"judge_grade": judged[q, d], "judge": identity, "prompt_version": PROMPT_VERSION})
                side.write(json.dumps(rec, ensure_ascii=False) + "\n")


def human_agreement(rows: list[dict], judged: dict[tuple[str, str], int]) -> dict:
    """Cohen's kappa of the judge against the graded rows of an annotation sheet, on the pairs both graded."""
    both = [(r["grade"], judged[r["qid"], r["unit_id"]]) for r in rows
            if r["grade"] is not None and (r["qid"], r["unit_id"]) in judged]
    h = [a for a, _ in both]
    j = [b for _, b in both]
    out = {"pairs": len(both), "sheet_graded": sum(r["grade"] is not None for r in rows)}
    if not both:
        out["note"] = "no pair of the sheet was both graded by people and judged; export the sheet from the same pool"
        return out
    out["exact_agreement"] = sum(a == b for a, b in both) / len(both)
    out["exact_agreement_ci"] = list(wilson_interval(sum(a == b for a, b in both), len(both)))
    out["kappa"] = cohen_kappa(h, j, labels=GRADES)
    lo, hi = kappa_interval(h, j, labels=GRADES)
    out["kappa_ci"] = None if math.isnan(lo) else [lo, hi]
    out["kappa_linear"] = cohen_kappa(h, j, labels=GRADES, weights="linear")
    out["kappa_quadratic"] = cohen_kappa(h, j, labels=GRADES, weights="quadratic")
    out["kappa_binary"] = cohen_kappa([a >= 1 for a in h], [b >= 1 for b in j], labels=[False, True])
    return out


def format_report(meta: dict) -> str:
    """The report in words, for the terminal."""
    r = meta["report"]
    lines = [f"judged the pool of {r['queries']} queries ({', '.join(meta['strategies'])}, depth {meta['depth']}): "
             f"{r['pool_pairs']} pairs, {r['graded']} graded by {meta['judge']} (prompt {meta['prompt_version']}) "
             f"in {meta['judge_seconds']:.0f} s",
             f"  answers without a readable grade: {r['parse_failures']} at first"
             + (f", {r['ungraded']} after asking again under a grammar" if r["grammar_fallback_calls"] else
                f", {r['ungraded']} left ungraded")
             + (f"; LLM errors {r['llm_errors']} (first: {r.get('first_llm_error')})" if r["llm_errors"] else ""),
             f"  judge grades 0/1/2/3: {'/'.join(str(r['judge_grades'][str(g)]) for g in GRADES)}",
             f"  labels added: {r['labels_added']} ({r['labels_added_relevant']} relevant)",
             "  in the pool: known positives graded >= 1 "
             + (f"{r['recall_known_positives']:.2f} [{r['recall_known_positives_ci'][0]:.2f}, "
                f"{r['recall_known_positives_ci'][1]:.2f}] (n={r['known_positives_graded']}, Wilson 95%)"
                if r["recall_known_positives"] is not None else "n/a (no known positive in the pool)")
             + f"; known negatives graded >= 1: {r['known_negatives_judged_relevant']} of "
               f"{r['known_negatives_graded']}"
             + (f" [{r['known_negatives_judged_relevant_ci'][0]:.2f}, {r['known_negatives_judged_relevant_ci'][1]:.2f}]"
                if r.get("known_negatives_judged_relevant_ci") else "")]
    card = meta.get("judge_card")
    if card:
        note = (f"; below the --min-kappa {meta['min_kappa']:g} floor, merged with --force"
                if meta.get("forced") and below_floor(card, meta["min_kappa"]) else "")
        lines.insert(1, f"  judge card (known labels, relevant = grade >= 2): {card['summary']}{note}")
    else:
        lines.insert(1, "  judge card: none (--check-pairs 0): the judge was not checked on known labels")
    agree = r.get("human_agreement")
    if agree:
        if agree.get("pairs"):
            ci = agree.get("kappa_ci")
            lines.append(f"  agreement with people ({agree['pairs']} pairs): kappa {agree['kappa']:.3f}"
                         + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " [CI undefined]")
                         + f", quadratic-weighted {agree['kappa_quadratic']:.3f}, relevant/not "
                         f"{agree['kappa_binary']:.3f}, exact {agree['exact_agreement']:.2f} "
                         f"[{agree['exact_agreement_ci'][0]:.2f}, {agree['exact_agreement_ci'][1]:.2f}]")
        else:
            lines.append(f"  agreement with people: {agree['note']}")
    k = meta["depth"]
    lines.append(f"  {'strategy':<14} nDCG@{k} before -> after (condensed)   Judged@{k} before -> after")
    for name, row in r["strategies"].items():
        def g(key, row=row):
            v = row.get(key)
            return "  n/a " if v is None else f"{v:.4f}"
        lines.append(f"  {name:<14} {g(f'ndcg@{k}_before')} -> {g(f'ndcg@{k}_after')} "
                     f"({g(f'ndcg@{k}_before_condensed')} -> {g(f'ndcg@{k}_after_condensed')})   "
                     f"{g(f'judged@{k}_before')} -> {g(f'judged@{k}_after')}")
    lines.append(f"written to {meta['folder']} (qrels/{meta['split']}.tsv, qrels/{meta['split']}.provenance.jsonl, "
                 f"{REPORT})" + (f"; MLflow run {meta['mlflow_run_id']}" if meta.get("mlflow_run_id") else ""))
    return "\n".join(lines)
