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
import hashlib
import json
import os
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import jieba

import lab
from lab.core.errors import ConfigError, DataError
from lab.core.paths import public_path
from lab.core.progress import progress as bar
from lab.data.beir import load_dataset
from lab.data.fingerprint import fingerprint
from lab.data.types import Corpus, Dataset, EvidenceSpan, Qrels, Queries
from lab.text.tokenize import NLTK_STOPWORDS, detect_language

VARIANTS = ("typo", "synonym", "distractor", "unanswerable")
TYPO_OPS = ("swap", "drop", "insert", "replace")
#: Version of the perturbation rules; bump when a rule changes so old variants are not mistaken for new ones.
PERTURB_VERSION = 1
RESOURCES = Path(__file__).resolve().parents[1] / "resources"
PROVENANCE_FILE = "PERTURBATION.json"
CHANGES_FILE = "perturbations.jsonl"

#: Default params of each variant (``--set typo.rate=0.3`` overrides one).
DEFAULTS: dict[str, dict] = {
    "typo": {"rate": 0.2, "ops": list(TYPO_OPS), "min_len": 4, "min_one": True},
    "synonym": {"rate": 0.5, "top": 3, "min_one": True},
    "distractor": {"source": "queries", "position": "end"},
    "unanswerable": {"rate": 0.25, "split": "test"},
}

_QWERTY = {
    "q": "wa", "w": "qeas", "e": "wrsd", "r": "etdf", "t": "ryfg", "y": "tugh", "u": "yihj", "i": "uojk",
    "o": "ipkl", "p": "ol", "a": "qwsz", "s": "weadzx", "d": "erfsxc", "f": "rtdgcv", "g": "tyfhvb",
    "h": "yugjbn", "j": "uihknm", "k": "iojlm", "l": "opk", "z": "asx", "x": "zsdc", "c": "xdfv", "v": "cfgb",
    "b": "vghn", "n": "bhjm", "m": "njk",
}
_EDGE_PUNCT = "\"'“”‘’«»()[]{}<>,.;:!?¿¡…*`"
_HAN = re.compile(r"[\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_LATIN_WORD = re.compile(r"[A-Za-z]+")


# ------------------------------------------------------------------------------------------------ resources
def read_table(path: Path) -> dict[str, list[str]]:
    """``key<TAB>v1|v2`` lines (``.gz`` read transparently) -> {key: [v1, v2]}."""
    if not path.is_file():
        raise ConfigError(f"word list {path} not found; pass an existing file (format: word<TAB>syn1|syn2)")
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    out = {}
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if "\t" not in line:
            raise DataError(path, "expected word<TAB>syn1|syn2|...", line=n,
                            hint="separate the word from its synonyms with one tab, synonyms with |")
        key, values = line.split("\t", 1)
        out[key] = [v for v in values.split("|") if v]
    return out


def _digest(path: Path) -> str:
    return f"{path.name}@{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


@dataclass
class Resources:
    """Word lists and the jieba segmenter one perturbation run uses (loaded lazily, owned by the caller).

    Paths default to the lists shipped in ``lab/resources``; any list in the same format can replace them.
    """

    synonyms_en: Path = RESOURCES / "synonyms_en.tsv.gz"
    synonyms_zh: Path = RESOURCES / "synonyms_zh.tsv.gz"
    homophones_zh: Path = RESOURCES / "homophones_zh.tsv"
    distractors_en: Path = RESOURCES / "distractors_en.txt"
    distractors_zh: Path = RESOURCES / "distractors_zh.txt"
    cache_dir: Path = Path(".cache")
    _loaded: dict = field(default_factory=dict, repr=False)

    def _get(self, name: str, loader):
        if name not in self._loaded:
            self._loaded[name] = loader()
        return self._loaded[name]

    def synonyms(self, language: str) -> dict[str, list[str]]:
        """word -> synonyms for "en" or "zh"."""
        path = self.synonyms_en if language == "en" else self.synonyms_zh
        return self._get(f"syn-{language}", lambda: read_table(Path(path)))

    def homophones(self) -> dict[str, str]:
        """character -> the other common characters of the same toned pinyin."""
        def load():
            out = {}
            for chars in read_table(Path(self.homophones_zh)).values():
                group = "".join(chars)
                for c in group:
                    out.setdefault(c, group.replace(c, ""))
            return out
        return self._get("homophones", load)

    def templates(self, language: str) -> list[str]:
        """Distractor clauses for "en" or "zh" (one per line, ``#`` comments skipped)."""
        path = Path(self.distractors_en if language == "en" else self.distractors_zh)

        def load():
            if not path.is_file():
                raise ConfigError(f"distractor list {path} not found; pass a text file with one clause per line")
            return [s.strip() for s in path.read_text(encoding="utf-8").splitlines()
                    if s.strip() and not s.startswith("#")]
        return self._get(f"tpl-{language}", load)

    def jieba(self):
        """A jieba.Tokenizer of its own (default dictionary; cache file under ``cache_dir/jieba``)."""
        def load():
            tk = jieba.Tokenizer(jieba.DEFAULT_DICT)
            tmp = Path(self.cache_dir) / "jieba"
            tmp.mkdir(parents=True, exist_ok=True)
            tk.tmp_dir = str(tmp)
            tk.initialize()
            return tk
        return self._get("jieba", load)

    def describe(self, variant: str) -> dict[str, str]:
        """Digests of the lists a variant reads (for provenance)."""
        files = {"typo": ("homophones_zh",), "synonym": ("synonyms_en", "synonyms_zh"),
                 "distractor": ("distractors_en", "distractors_zh")}.get(variant, ())
        return {name: _digest(Path(getattr(self, name))) for name in files if Path(getattr(self, name)).is_file()}


# ------------------------------------------------------------------------------------------------ tokens
@dataclass(frozen=True)
class Unit:
    """An editable word of a text: ``text[start:end]``, its script ("latin" or "han")."""

    start: int
    end: int
    text: str
    script: str


def latin_words(text: str, min_len: int = 1) -> list[Unit]:
    """Whitespace-separated tokens that are pure ASCII letters once edge punctuation is stripped, are at least
    ``min_len`` long and are not acronyms (no capital after the first letter). Numbers, ids, hyphenated or
    underscored tokens, URLs and tokens glued to Han characters are never units."""
    out = []
    for m in re.finditer(r"\S+", text):
        tok, start = m.group(0), m.start()
        core = tok.strip(_EDGE_PUNCT)
        if not core:
            continue
        offset = start + tok.index(core)
        if not _LATIN_WORD.fullmatch(core) or len(core) < min_len or any(c.isupper() for c in core[1:]):
            continue
        out.append(Unit(offset, offset + len(core), core, "latin"))
    return out


def han_words(text: str, res: Resources) -> list[Unit]:
    """jieba words (accurate mode) of each Han run of ``text``, with their offsets."""
    out = []
    for m in _HAN.finditer(text):
        for word, s, e in res.jieba().tokenize(m.group(0)):
            out.append(Unit(m.start() + s, m.start() + e, word, "han"))
    return out


def _pick(units: list, rate: float, rng: random.Random, min_one: bool) -> list:
    """Each unit with probability ``rate`` (one draw per unit, in order); one at random if none and ``min_one``."""
    chosen = [u for u in units if rng.random() < rate]
    if not chosen and min_one and units:
        chosen = [rng.choice(units)]
    return chosen


def _apply(text: str, replacements: list[tuple[Unit, str]]) -> str:
    """``text`` with each unit's span replaced (units do not overlap)."""
    out, pos = [], 0
    for unit, new in sorted(replacements, key=lambda r: r[0].start):
        out.append(text[pos:unit.start])
        out.append(new)
        pos = unit.end
    out.append(text[pos:])
    return "".join(out)


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions
    cost 1 each (a transposed pair is not edited again)."""
    prev2, prev = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


# ------------------------------------------------------------------------------------------------ typo
def _neighbour(ch: str, rng: random.Random) -> str:
    """A QWERTY neighbour of ``ch`` (case kept)."""
    new = rng.choice(_QWERTY[ch.lower()])
    return new.upper() if ch.isupper() else new


def keyboard_typo(word: str, op: str, rng: random.Random) -> str:
    """``word`` with one edit ``op`` (swap / drop / insert / replace), never at the first letter.

    A swap needs two adjacent different letters after the first; where there are none, the word is returned
    unchanged (the caller tries another op)."""
    n = len(word)
    if n < 2:
        return word
    if op == "swap":
        spots = [i for i in range(1, n - 1) if word[i] != word[i + 1]]
        if not spots:
            return word
        i = rng.choice(spots)
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if op == "drop":
        i = rng.randrange(1, n)
        return word[:i] + word[i + 1:]
    if op == "insert":
        i = rng.randrange(1, n + 1)
        return word[:i] + _neighbour(word[i - 1], rng) + word[i:]
    if op == "replace":
        i = rng.randrange(1, n)
        return word[:i] + _neighbour(word[i], rng) + word[i + 1:]
    raise ConfigError(f"typo: unknown op {op!r}; use some of {', '.join(TYPO_OPS)}")


def homophone_typo(word: str, homophones: Mapping[str, str], rng: random.Random) -> str:
    """``word`` with one character replaced by a homophone (unchanged when none of its characters has one)."""
    spots = [i for i, c in enumerate(word) if homophones.get(c)]
    if not spots:
        return word
    i = rng.choice(spots)
    return word[:i] + rng.choice(homophones[word[i]]) + word[i + 1:]


def typo_text(text: str, rng: random.Random, res: Resources, rate: float = 0.2, ops=TYPO_OPS, min_len: int = 4,
              min_one: bool = True) -> tuple[str, list[dict]]:
    """Typos in ``text`` (see the module conventions); returns the new text and one edit record per word."""
    ops = list(ops)
    bad = [o for o in ops if o not in TYPO_OPS]
    if bad or not ops:
        raise ConfigError(f"typo.ops={ops}: use a non-empty subset of {', '.join(TYPO_OPS)}")
    hom = res.homophones() if _HAN.search(text) else {}
    units = latin_words(text, min_len) + [u for u in han_words(text, res) if any(hom.get(c) for c in u.text)]
    units.sort(key=lambda u: u.start)
    edits, reps = [], []
    for u in _pick(units, rate, rng, min_one):
        if u.script == "han":
            new, op = homophone_typo(u.text, hom, rng), "homophone"
        else:
            order = ops[:]
            rng.shuffle(order)
            new, op = u.text, None
            for op in order:  # swap may be impossible ("sees"): fall back to the next op
                new = keyboard_typo(u.text, op, rng)
                if new != u.text:
                    break
        if new != u.text:
            reps.append((u, new))
            edits.append({"op": op, "start": u.start, "before": u.text, "after": new})
    return _apply(text, reps), edits


# ------------------------------------------------------------------------------------------------ synonym
def _stopwords() -> frozenset:
    return NLTK_STOPWORDS


def _match_case(original: str, new: str) -> str:
    return new[:1].upper() + new[1:] if original[:1].isupper() else new


def synonym_text(text: str, rng: random.Random, res: Resources, rate: float = 0.5, top: int = 3,
                 min_one: bool = True) -> tuple[str, list[dict]]:
    """Word-list synonym substitution in ``text`` (see the module conventions)."""
    stop = _stopwords()
    en = res.synonyms("en")
    units = [u for u in latin_words(text, 3) if u.text.lower() not in stop and en.get(u.text.lower())]
    if _HAN.search(text):
        zh = res.synonyms("zh")
        units += [u for u in han_words(text, res) if len(u.text) >= 2 and zh.get(u.text)]
        units.sort(key=lambda u: u.start)
    edits, reps = [], []
    for u in _pick(units, rate, rng, min_one):
        table = en if u.script == "latin" else res.synonyms("zh")
        key = u.text.lower() if u.script == "latin" else u.text
        new = rng.choice(table[key][:max(1, int(top))])
        if u.script == "latin":
            new = _match_case(u.text, new)
        reps.append((u, new))
        edits.append({"op": "synonym", "start": u.start, "before": u.text, "after": new})
    return _apply(text, reps), edits


# ------------------------------------------------------------------------------------------------ distractor
def _join(text: str, clause: str, position: str, language: str) -> str:
    sep = "" if language == "zh" else " "
    if position == "end":
        return f"{text}{sep}{clause}"
    if position == "start":
        return f"{clause}{sep}{text}"
    raise ConfigError(f"distractor.position={position!r}: use 'end' or 'start'")


def distractor_text(text: str, clause: str, position: str = "end") -> tuple[str, list[dict]]:
    """``text`` with ``clause`` appended or prepended (no space between Chinese texts)."""
    lang = detect_language(text)
    return _join(text, clause, position, lang), [{"op": "distractor", "position": position, "clause": clause}]


def _distractor_pool(queries: Queries) -> dict[str, list[str]]:
    """Candidate query ids per language, in a fixed order."""
    pool: dict[str, list[str]] = {"en": [], "zh": []}
    for qid in sorted(queries):
        pool[detect_language(queries[qid])].append(qid)
    return pool


def _relevant(qrels: Mapping[str, Mapping[str, int]], qid: str) -> set[str]:
    return {d for d, g in qrels.get(qid, {}).items() if g >= 1}


def draw_clause(qid: str, text: str, rng: random.Random, queries: Queries, qrels, pool, res: Resources,
                source: str = "queries") -> tuple[str, str | None]:
    """The distractor clause for one query and the id of the query it came from (None for a template)."""
    lang = detect_language(text)
    if source == "templates":
        return rng.choice(res.templates(lang)), None
    if source != "queries":
        raise ConfigError(f"distractor.source={source!r}: use 'queries' or 'templates'")
    mine = _relevant(qrels, qid)
    for _ in range(100):  # rejection sampling: another query, no shared relevant document
        other = rng.choice(pool[lang]) if pool[lang] else None
        if other is None:
            break
        if other != qid and not (mine & _relevant(qrels, other)) and queries[other].strip() != text.strip():
            return queries[other].strip(), other
    raise ConfigError(f"distractor: no other {lang} query to draw a clause from for query {qid!r}; "
                      "use --set distractor.source=templates")


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
    pool = _distractor_pool(queries) if variant == "distractor" else None
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
