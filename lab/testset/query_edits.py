"""The edits a perturbed query is made of (:mod:`lab.testset.perturb` makes the variants from them): typos
(keyboard neighbours, Chinese homophones), synonyms from the shipped word lists, and a distractor clause taken from
another query; the word lists themselves (:class:`Resources`). Every edit is seeded and deterministic."""
from __future__ import annotations

import gzip
import hashlib
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import jieba

from lab.core.errors import ConfigError, DataError
from lab.data.types import Queries
from lab.text.tokenize import NLTK_STOPWORDS, detect_language

TYPO_OPS = ("swap", "drop", "insert", "replace")
RESOURCES = Path(__file__).resolve().parents[1] / "resources"

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


def distractor_pool(queries: Queries) -> dict[str, list[str]]:
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
