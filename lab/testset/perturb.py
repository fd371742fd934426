"""Seeded robustness variants of a BEIR test set: typos, synonyms, distractor clauses, unanswerable queries.

``lab testset perturb SET --variants typo,synonym,distractor,unanswerable --out DIR --seed 0`` writes one
BEIR-layout folder per variant, ``DIR/<set>-<variant>``, that every reader of datasets loads as it is.

Conventions
- Query side only: typo, synonym and distractor change query texts and nothing else (same query ids, same qrels,
  same corpus: ``corpus.jsonl[.gz]`` is a relative symbolic link to the source's, or a copy with
  ``link_corpus=False`` or where links are impossible). ``unanswerable`` changes the corpus (see below).
- Determinism: each query draws from its own ``random.Random("raglab-perturb:<seed>:<variant>:<query id>")``,
  so a variant depends on the seed, the params, the word lists and that query alone (not on query order or on the
  other queries; distractor clauses are drawn from the pool of the other queries, so they depend on it).
  The same inputs give byte-identical files.
- Rates are per eligible unit (word): each one is changed with probability ``rate``; when none was drawn and
  the query has at least one eligible unit, one of them is changed (``min_one``), so "changed" means "could be".
  Coverage = share of queries actually changed; it is reported per variant and split.
- typo: English/Latin words of at least ``min_len`` letters get one keyboard edit each: swap two adjacent
  different letters, drop a letter, insert a QWERTY neighbour of the letter before, or replace a letter by a
  QWERTY neighbour (case kept). The first letter is never touched. Never edited: tokens holding a digit or any
  character other than ASCII letters once surrounding punctuation is stripped (numbers, ids, ``IL-6``,
  ``set_routing_alpha``, ``e.g.``, URLs), and acronyms / gene names (a capital after the first letter:
  ``PrP``, ``TNF``). Chinese words (jieba, accurate mode) get a homophone typo: one character replaced by
  another common character of the same toned pinyin (the typo a pinyin IME makes: 超声仪 -> 超生仪);
  see ``lab/resources/homophones_zh.tsv``. Each edited word is at edit distance 1 (optimal string alignment)
  from its original.
- synonym: word-list substitution, no model. English: ``lab/resources/synonyms_en.tsv.gz`` (WordNet 3.0, the
  most frequent sense of each lemma; regular noun plurals), words of >= 3 letters that are not stopwords (NLTK
  list) nor acronyms, matched lowercase, replacement capitalised like the original. Chinese: jieba words of >= 2
  characters looked up in ``lab/resources/synonyms_zh.tsv.gz`` (HIT Cilin "=" groups). The replacement is drawn
  among the first ``top`` synonyms. Substitution is sense-blind: some replacements change the meaning.
- distractor: one irrelevant clause is appended (``position="end"``, default) or prepended (``"start"``).
  ``source="queries"`` (default) draws the clause from the other queries of the set that share no relevant
  document with this one and are in the same language (in-domain noise); ``source="templates"`` draws it from
  ``lab/resources/distractors_<en|zh>.txt`` (topic-free noise such as "Please keep the answer short.").
- unanswerable: a seeded share ``rate`` (default 0.25) of the queries of one split (``split``, default "test")
  are held out and every document relevant to them (grade >= 1) is removed from the corpus, which is written
  anew (``corpus.jsonl.gz``). Queries that share a relevant document are held out together (connected
  components), so every kept query keeps all its relevant documents. Held-out queries stay in
  ``queries.jsonl`` (text unchanged) but have no qrels rows; their ids are listed in ``PERTURBATION.json``
  (``unanswerable.query_ids``) and ``perturbations.jsonl``, never in the query metadata (a strategy must not
  see them). :func:`load_variant` adds them to the split's qrels with no relevant document, so
  :func:`lab.experiment.run.run_experiment` searches them and the metrics exclude them (how confident a strategy
  stays on them is measured by :mod:`lab.analysis.robustness`). Only that split's qrels are written.
- Provenance: ``PERTURBATION.json`` (variant, seed, resolved params, source path/name/fingerprint, splits, query
  counts, share changed, word-list digests, corpus mode) and ``perturbations.jsonl`` (per query: original text,
  new text, changed, edits). No timestamps, so reruns reproduce the same fingerprint.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import lab
from lab.core.errors import ConfigError, DataError
from lab.core.paths import public_path
from lab.core.progress import progress as bar
from lab.data.beir import load_dataset
from lab.data.fingerprint import fingerprint
from lab.data.types import Corpus, Dataset, EvidenceSpan, Qrels, Queries
from lab.testset.query_edits import (
    TYPO_OPS,
    Resources,
    distractor_pool,
    distractor_text,
    draw_clause,
    synonym_text,
    typo_text,
)

VARIANTS = ("typo", "synonym", "distractor", "unanswerable")
#: Version of the perturbation rules; bump when a rule changes so old variants are not mistaken for new ones.
PERTURB_VERSION = 1
PROVENANCE_FILE = "PERTURBATION.json"
CHANGES_FILE = "perturbations.jsonl"

#: Default params of each variant (``--set typo.rate=0.3`` overrides one).
DEFAULTS: dict[str, dict] = {
    "typo": {"rate": 0.2, "ops": list(TYPO_OPS), "min_len": 4, "min_one": True},
    "synonym": {"rate": 0.5, "top": 3, "min_one": True},
    "distractor": {"source": "queries", "position": "end"},
    "unanswerable": {"rate": 0.25, "split": "test"},
}



# ------------------------------------------------------------------------------------------------ unanswerable
def choose_unanswerable(qrels: Qrels, rate: float, seed: int = 0) -> tuple[list[str], set[str]]:
    """Held-out query ids and the documents to remove (see the module conventions).

    Queries sharing a relevant document form one group (union-find); groups are shuffled with
    ``random.Random("raglab-perturb:<seed>:unanswerable")`` and taken whole until ``round(rate * n)`` queries
    (n: queries with a relevant document) are held out. Returns (sorted held-out ids, removed doc ids).
    """
    if not 0.0 < rate < 1.0:
        raise ConfigError(f"unanswerable.rate={rate}: must lie strictly between 0 and 1, e.g. 0.25")
    answerable = [q for q in qrels if qrels.relevant(q)]
    parent = {q: q for q in answerable}

    def find(q):
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    owner: dict[str, str] = {}
    for q in answerable:
        for d in sorted(qrels.relevant(q)):
            if d in owner:
                parent[find(q)] = find(owner[d])
            else:
                owner[d] = q
    groups: dict[str, list[str]] = {}
    for q in answerable:
        groups.setdefault(find(q), []).append(q)
    ordered = sorted(groups.values(), key=lambda g: min(g))
    random.Random(f"raglab-perturb:{seed}:unanswerable").shuffle(ordered)
    target = max(1, round(rate * len(answerable)))
    held: list[str] = []
    for g in ordered:
        if len(held) >= target:
            break
        held += g
    removed = set().union(*(qrels.relevant(q) for q in held)) if held else set()
    return sorted(held), removed


# ------------------------------------------------------------------------------------------------ writing
def _write_jsonl(path: Path, rows: Iterable[dict], compress: bool = False) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    if compress:
        with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
            gz.write(data)
    else:
        path.write_bytes(data)


def _write_qrels(path: Path, qrels: Mapping[str, Mapping[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _write_queries(path: Path, queries: Queries, texts: Mapping[str, str]) -> None:
    rows = []
    for qid in queries:
        row = {"_id": qid, "text": texts.get(qid, queries[qid])}
        if qid in queries.metadata:
            row["metadata"] = queries.metadata[qid]
        rows.append(row)
    _write_jsonl(path, rows)


def _write_evidence(path: Path, spans: list[EvidenceSpan]) -> None:
    if spans:
        _write_jsonl(path, ({"query_id": s.query_id, "doc_id": s.doc_id, "spans": [[s.start, s.end]],
                             "label": s.label, "tier": s.tier, "grade": s.grade} for s in spans))


def _corpus_file(source: Path) -> Path:
    found = [p for p in (source / "corpus.jsonl", source / "corpus.jsonl.gz") if p.is_file()]
    if not found:
        raise DataError(source / "corpus.jsonl", "corpus file not found", hint="pass a BEIR dataset folder")
    return found[0]


def _link_corpus(source: Path, dest: Path, link: bool) -> dict:
    """Symlink (relative) or copy the source corpus file into ``dest``; returns what was done and the file name
    (no paths: the provenance, hence the variant's fingerprint, does not depend on where it was written)."""
    src = _corpus_file(source).resolve()
    target = dest / src.name
    if link:
        try:
            os.symlink(os.path.relpath(src, dest.resolve()), target)
            return {"mode": "link", "file": src.name}
        except OSError:  # e.g. no symlink permission on Windows: fall back to a copy
            pass
    shutil.copyfile(src, target)
    return {"mode": "copy", "file": src.name}


def _write_corpus(path: Path, corpus: Corpus, keep: Iterable[str]) -> None:
    rows = []
    for did in keep:
        d = corpus[did]
        row = {"_id": d.id, "title": d.title, "text": d.text}
        if d.metadata:
            row["metadata"] = dict(d.metadata)
        rows.append(row)
    _write_jsonl(path, rows, compress=True)


# ------------------------------------------------------------------------------------------------ variants
@dataclass
class Change:
    """What a variant did to one query."""

    qid: str
    original: str
    text: str
    edits: list[dict] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.text != self.original

    def record(self) -> dict:
        return {"_id": self.qid, "original": self.original, "text": self.text, "changed": self.changed,
                "edits": self.edits}


def _rng(seed: int, variant: str, qid: str) -> random.Random:
    return random.Random(f"raglab-perturb:{seed}:{variant}:{qid}")


def resolve_params(variant: str, params: Mapping | None = None) -> dict:
    """Defaults of ``variant`` updated with ``params``; unknown keys are an error."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown variant {variant!r}; use some of {', '.join(VARIANTS)}")
    out = {**DEFAULTS[variant]}
    for k, v in (params or {}).items():
        if k not in out:
            raise ConfigError(f"{variant}: unknown param {k!r}; known: {', '.join(sorted(out))}")
        out[k] = v
    if "rate" in out and not 0.0 < float(out["rate"]) <= 1.0:
        raise ConfigError(f"{variant}.rate={out['rate']}: must lie in (0, 1]")
    return out


def perturb_queries(queries: Queries, variant: str, seed: int = 0, params: Mapping | None = None,
                    res: Resources | None = None, qrels: Mapping[str, Mapping[str, int]] | None = None,
                    progress: bool = False) -> dict[str, Change]:
    """One query-side variant ("typo", "synonym" or "distractor") of each query: qid -> :class:`Change`.

    ``qrels`` (qid -> {doc: grade}, all splits merged) keeps distractor clauses away from queries sharing a
    relevant document."""
    p = resolve_params(variant, params)
    res = res or Resources()
    qrels = qrels or {}
    pool = distractor_pool(queries) if variant == "distractor" else None
    out = {}
    for qid in bar(list(queries), desc=f"perturb {variant}", enabled=progress and len(queries) > 500):
        text, rng = queries[qid], _rng(seed, variant, qid)
        if variant == "typo":
            new, edits = typo_text(text, rng, res, rate=float(p["rate"]), ops=p["ops"], min_len=int(p["min_len"]),
                                   min_one=bool(p["min_one"]))
        elif variant == "synonym":
            new, edits = synonym_text(text, rng, res, rate=float(p["rate"]), top=int(p["top"]),
                                      min_one=bool(p["min_one"]))
        elif variant == "distractor":
            clause, other = draw_clause(qid, text, rng, queries, qrels, pool, res, source=p["source"])
            new, edits = distractor_text(text, clause, p["position"])
            edits[0]["from_query"] = other
        else:
            raise ConfigError(f"perturb_queries: {variant!r} is not a query-side variant (typo, synonym, distractor)")
        out[qid] = Change(qid, text, new, edits)
    return out


def _merged_qrels(qrels: Mapping[str, Qrels]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q in qrels.values():
        for qid, docs in q.qrels.items():
            out.setdefault(qid, {}).update(docs)
    return out


def _share(changes: Mapping[str, Change], qids: Iterable[str]) -> dict:
    qids = [q for q in qids if q in changes]
    n_changed = sum(changes[q].changed for q in qids)
    return {"n_queries": len(qids), "n_changed": n_changed,
            "share_changed": round(n_changed / len(qids), 6) if qids else 0.0}


def _source_info(ds: Dataset) -> dict:
    return {"path": public_path(ds.path), "name": ds.name, "fingerprint": fingerprint(ds.path)}


def make_variant(ds: Dataset, variant: str, out_dir: Path | str, seed: int = 0, params: Mapping | None = None,
                 splits: Iterable[str] | None = None, link_corpus: bool = True, res: Resources | None = None,
                 progress: bool = False) -> dict:
    """Write one variant of a loaded dataset into ``out_dir`` (created; must not exist or be empty).

    ``splits``: the qrels splits whose queries are perturbed and written (default: all; the unanswerable variant
    takes its ``split`` param instead). Returns the provenance dict written to ``PERTURBATION.json``."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out}: folder exists and is not empty; choose another --out or remove it")
    out.mkdir(parents=True, exist_ok=True)
    res = res or Resources()
    p = resolve_params(variant, params)
    prov: dict = {"variant": variant, "perturb_version": PERTURB_VERSION, "seed": int(seed), "params": p,
                  "source": _source_info(ds), "raglab_version": lab.__version__,
                  "resources": {} if variant == "distractor" and p["source"] == "queries" else res.describe(variant)}
    if variant == "unanswerable":
        split = p["split"]
        if split not in ds.qrels:
            raise ConfigError(f"unanswerable.split={split!r}: {ds.path} has qrels for {sorted(ds.qrels)}; "
                              "choose one with --set unanswerable.split=NAME")
        queries, qrels = ds.split(split)
        held, removed = choose_unanswerable(qrels, float(p["rate"]), seed)
        held_set = set(held)
        keep_docs = [d for d in ds.corpus.ids if d not in removed]
        _write_corpus(out / "corpus.jsonl.gz", ds.corpus, keep_docs)
        _write_queries(out / "queries.jsonl", queries, {})
        kept = {q: docs for q, docs in qrels.qrels.items() if q not in held_set}
        _write_qrels(out / "qrels" / f"{split}.tsv", kept)
        _write_evidence(out / "evidence.jsonl", [s for s in ds.evidence if s.query_id in kept
                                                 and s.doc_id not in removed])
        _write_jsonl(out / CHANGES_FILE, ({"_id": q, "unanswerable": q in held_set,
                                           "removed_docs": sorted(qrels.relevant(q)) if q in held_set else []}
                                          for q in queries))
        prov.update({"splits": [split], "n_queries": len(queries), "n_changed": len(held),
                     "share_changed": round(len(held) / len(queries), 6) if len(queries) else 0.0,
                     "corpus": {"mode": "filtered", "n_docs": len(keep_docs), "n_removed": len(removed)},
                     "unanswerable": {"query_ids": held, "n_queries": len(held), "removed_docs": sorted(removed),
                                      "n_answerable": len(kept)}})
    else:
        splits = list(ds.qrels) if splits is None else list(splits)
        missing = [s for s in splits if s not in ds.qrels]
        if missing:
            raise ConfigError(f"splits {missing} not in {ds.path} (it has {sorted(ds.qrels)})")
        qids = list(dict.fromkeys(q for s in splits for q in ds.qrels[s].query_ids if q in ds.queries))
        queries = ds.queries.subset(qids)
        changes = perturb_queries(queries, variant, seed, p, res, qrels=_merged_qrels(ds.qrels), progress=progress)
        prov["corpus"] = _link_corpus(Path(ds.path), out, link_corpus)
        _write_queries(out / "queries.jsonl", queries, {q: c.text for q, c in changes.items()})
        for s in splits:
            _write_qrels(out / "qrels" / f"{s}.tsv", ds.qrels[s].qrels)
        _write_evidence(out / "evidence.jsonl", [s for s in ds.evidence if s.query_id in changes])
        _write_jsonl(out / CHANGES_FILE, (c.record() for c in changes.values()))
        prov.update({"splits": splits, **_share(changes, qids),
                     "by_split": {s: _share(changes, ds.qrels[s].query_ids) for s in splits}})
        if variant in ("typo", "synonym"):
            n_edits = [len(c.edits) for c in changes.values() if c.changed]
            prov["mean_edits_per_changed_query"] = round(sum(n_edits) / len(n_edits), 4) if n_edits else 0.0
    (out / PROVENANCE_FILE).write_text(json.dumps(prov, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return prov


def perturb_dataset(path: Path | str, variants: Iterable[str], out: Path | str, seed: int = 0,
                    params: Mapping[str, Mapping] | None = None, splits: Iterable[str] | None = None,
                    link_corpus: bool = True, res: Resources | None = None, progress: bool = True) -> dict[str, dict]:
    """Write each variant of the dataset at ``path`` to ``out/<name>-<variant>``; variant -> provenance.

    ``params``: variant -> {param: value} overrides of :data:`DEFAULTS`."""
    variants = [v.strip() for v in variants if v.strip()]
    for v in variants:
        resolve_params(v, (params or {}).get(v))  # fail before any work
    extra = set(params or {}) - set(variants)
    if extra:
        raise ConfigError(f"params given for variants not requested: {sorted(extra)}; add them to --variants")
    ds = load_dataset(path, progress=progress)
    res = res or Resources()
    return {v: make_variant(ds, v, Path(out) / f"{ds.name}-{v}", seed, (params or {}).get(v), splits, link_corpus,
                            res, progress) for v in variants}


# ------------------------------------------------------------------------------------------------ reading
def read_provenance(path: Path | str) -> dict:
    """The ``PERTURBATION.json`` of a variant folder."""
    p = Path(path) / PROVENANCE_FILE
    if not p.is_file():
        raise DataError(p, "not a perturbed variant (no PERTURBATION.json)",
                        hint="make one with `lab testset perturb SET --variants ... --out DIR`")
    return json.loads(p.read_text(encoding="utf-8"))


def unanswerable_ids(path: Path | str) -> list[str]:
    """Held-out query ids of an unanswerable variant (empty for other variants)."""
    return list(read_provenance(path).get("unanswerable", {}).get("query_ids", []))


def load_variant(path: Path | str, progress: bool = True) -> Dataset:
    """Load a variant folder; the held-out queries of an unanswerable variant are added to its split's qrels
    with no document, so experiments search them and the metrics exclude them (counted in ``excluded``)."""
    ds = load_dataset(path, progress=progress)
    prov = read_provenance(path)
    held = prov.get("unanswerable", {}).get("query_ids", [])
    if held:
        split = prov["splits"][0]
        q = ds.qrels[split]
        ds.qrels[split] = Qrels({**q.qrels, **{h: {} for h in held if h in ds.queries}}, name=q.name)
    return ds
