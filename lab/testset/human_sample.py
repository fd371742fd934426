"""Which queries people grade: a uniform random sample (seeded), and how many more a pilot says are needed.

Prediction-powered estimates (lab.metrics.ppi) are unbiased only when the human-graded queries are a uniform
random sample of the set's queries. :func:`uniform_sample` draws it: ``random.Random(seed).sample`` of the
sorted candidate ids, returned sorted (the same draw ``export-annotation`` has always made for a seeded sample).

A pilot (:func:`pilot_queries_needed`): people's grades on at least
:data:`lab.metrics.ppi.MIN_HUMAN_QUERIES` queries. The strategies' ranked lists are scored under the set's
labels (the judge's) on every query and under the pilot's grades on the pilot queries; the top two by PPI mean
give the per-query difference whose spread says how many human-graded queries a PPI++ interval of half-width
``half_width`` needs (lab.metrics.ppi.human_queries_needed). ``export-annotation --queries auto --pilot F`` then
draws that many minus the pilot's, among the queries the pilot did not grade.

A judged set can keep people's grades beside its own labels (:func:`record_human_grades`, what
``import-annotation --record-in SET`` does): ``<set>/human-qrels/<split>.tsv`` (BEIR tsv, every row of each query
graded in full) and, in its ``provenance.json``, ``human_grades`` (which queries, how they were drawn, and where the
file is). The file is written first and the provenance last, each atomically, so a set whose provenance names the
grades always holds them. ``lab compare --dataset SET`` then reads them (:func:`recorded_human_grades`) without
``--human-qrels``.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lab.core.atomic import write_text_atomic
from lab.core.errors import ConfigError, DataError
from lab.data.beir import qrels_files
from lab.data.trec import read_qrels, read_qrels_rows
from lab.data.types import Run
from lab.metrics.ppi import MIN_HUMAN_QUERIES, human_queries_needed, per_query_under, ppi_mean
from lab.testset.io import PROVENANCE, read_provenance, write_provenance

#: How the human subset was drawn, as provenance records it.
UNIFORM = "uniform"
#: Provenance key of the queries people graded in full (``lab testset import-annotation``).
HUMAN_GRADES_KEY = "human_grades"
#: Folder of a judged set that holds people's grades (``<split>.tsv``), beside the set's own ``qrels/``.
HUMAN_QRELS_DIR = "human-qrels"


@dataclass(frozen=True)
class Pilot:
    """``--queries auto --pilot PATH``: people's grades on a pilot (qrels file), and the CI half-width the top two
    strategies' difference should reach (``--target-halfwidth``)."""

    path: str | Path
    half_width: float = 0.02


def uniform_sample(candidates: Sequence[str], n: int, seed: int) -> list[str]:
    """``n`` of ``candidates`` drawn uniformly at random without replacement (seeded), sorted."""
    return sorted(random.Random(seed).sample(sorted(candidates), n))


def check_grades(path) -> tuple[str, list]:
    """The rows of people's grades at ``path`` (BEIR tsv or TREC qrels; lab.data.trec.read_qrels_rows) and their
    format; a grade outside 0-3 is a one-line DataError naming the file, line and field."""
    fmt, rows = read_qrels_rows(path)
    for r in rows:
        if not 0 <= r.grade <= 3:
            raise DataError(path, f"grade {r.grade} is outside 0-3", line=r.line,
                            field="rel" if fmt == "trec" else "score",
                            hint="people's grades are 0 not relevant, 1 partly, 2 relevant, 3 answers it fully")
    return fmt, rows


def read_pilot(path, split_queries: Sequence[str]) -> dict[str, dict[str, int]]:
    """People's grades of a pilot (BEIR tsv or TREC qrels; every query in it counts as graded): grades 0-3, at
    least :data:`MIN_HUMAN_QUERIES` queries, each a query of the split; else a one-line error."""
    fmt, rows = check_grades(path)
    known = set(split_queries)
    for r in rows:
        if r.query_id not in known:
            raise DataError(path, f"query {r.query_id!r} is not a query of the split", line=r.line,
                            field="qid" if fmt == "trec" else "query-id",
                            hint="the pilot grades queries of the set being sampled")
    qrels = {q: dict(d) for q, d in read_qrels(path).qrels.items()}
    if len(qrels) < MIN_HUMAN_QUERIES:
        raise ConfigError(f"--pilot {path}: {len(qrels)} human-graded queries; at least {MIN_HUMAN_QUERIES} are "
                          "needed for a pilot")
    return qrels


def pilot_queries_needed(runs: Mapping[str, Run], judge_qrels: Mapping[str, Mapping[str, int]],
                         pilot: Mapping[str, Mapping[str, int]], split_queries: Sequence[str],
                         metric: str = "ndcg@10", half_width: float = 0.02) -> dict:
    """``{"needed", "more", "top_two", "human_only", "n_pilot", "n_total"}``: the human-graded queries (in all) the
    top two strategies' difference needs for a PPI++ CI of ``half_width`` (None: more than the set holds), and
    how many more than the pilot that is. Needs at least two strategies."""
    if len(runs) < 2:
        raise ConfigError("--queries auto: needs at least two strategies (--strategies a,b) to size the difference "
                          "between the top two")
    graded = [q for q in split_queries if q in pilot]
    rest = [q for q in split_queries if q not in pilot]
    scored = {}
    for name, run in runs.items():
        y = per_query_under(run, pilot, metric, graded)
        yh = per_query_under(run, judge_qrels, metric, graded)
        yu = per_query_under(run, judge_qrels, metric, rest)
        scored[name] = (ppi_mean(y, yh, yu).mean, y, yh, yu)
    (a, sa), (b, sb) = sorted(scored.items(), key=lambda kv: -kv[1][0])[:2]
    need = human_queries_needed(sa[1] - sb[1], sa[2] - sb[2], sa[3] - sb[3], half_width)
    n = need["ppi"]
    return {"needed": n, "more": None if n is None else max(0, n - len(graded)), "top_two": [a, b],
            "human_only": need["human_only"], "n_pilot": len(graded), "n_total": need["n_total"]}


def check_record_in(folder: str | Path, graded_queries: Sequence[str], split: str = "test") -> None:
    """ConfigError (one line) unless ``folder`` is a set with qrels for ``split`` holding every graded query."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"--record-in {folder}: no such folder; pass the judged set the runs are scored on")
    files = qrels_files(folder)
    if split not in files:
        raise ConfigError(f"--record-in {folder}: no qrels for split {split!r} (qrels/{split}.tsv)")
    known = set(read_qrels(files[split]).qrels)
    for q in graded_queries:
        if q not in known:
            raise ConfigError(f"--record-in {folder}: query {q!r} graded on the sheet is not a query of its {split} "
                              "split; record the grades in the set the sheet was exported from")


def record_human_grades(folder: str | Path, qrels: Mapping[str, Mapping[str, int]], human_grades: Mapping,
                        split: str = "test") -> Path:
    """Keep people's grades in the judged set ``folder``: ``human-qrels/<split>.tsv`` holds the grades of the
    queries ``human_grades["graded_queries"]`` names (from ``qrels``), and ``provenance.json`` gets ``human_grades``
    with ``"qrels"`` (that file, relative to the set). Each graded query must be a query of the set's ``split``
    (ConfigError before anything is written). Returns the grades file."""
    folder = Path(folder)
    graded = [str(q) for q in human_grades.get("graded_queries", [])]
    check_record_in(folder, graded, split)
    rows = ["query-id\tcorpus-id\tscore\n"]
    rows += [f"{q}\t{d}\t{int(g)}\n" for q in graded for d, g in qrels.get(q, {}).items()]
    rel = f"{HUMAN_QRELS_DIR}/{split}.tsv"
    (folder / HUMAN_QRELS_DIR).mkdir(exist_ok=True)
    path = write_text_atomic(folder / rel, "".join(rows))
    prov = read_provenance(folder)
    prov[HUMAN_GRADES_KEY] = {**dict(human_grades), "split": split, "qrels": rel}
    write_provenance(folder, prov)  # last: the provenance names the grades only once they are there
    return path


def recorded_human_grades(folder: str | Path, split: str = "test") -> tuple[dict[str, dict[str, int]], dict] | None:
    """People's grades a judged set keeps (:func:`record_human_grades`): (qid -> {doc: grade} for each query graded
    in full, the provenance record), or None when the set records none for ``split``."""
    folder = Path(folder)
    info = read_provenance(folder).get(HUMAN_GRADES_KEY) or {}
    if not info.get("qrels") or info.get("split", split) != split:
        return None
    path = folder / str(info["qrels"])
    if not path.is_file():
        raise DataError(folder / PROVENANCE, f"human_grades names {info['qrels']}, which is missing",
                        field="human_grades.qrels", hint="import the annotation sheet again with --record-in")
    check_grades(path)
    qrels = read_qrels(path).qrels
    return {str(q): dict(qrels.get(str(q), {})) for q in info.get("graded_queries", [])}, dict(info)
