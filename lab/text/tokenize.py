"""Tokenisation for sparse retrieval: English (stopwords, Snowball stemming) and Chinese (jieba).

Conventions
- Text is NFKC-normalised (full-width letters and digits, ligatures fold to their plain forms) and lowercased.
- Word tokens are Unicode ``\\w+`` runs, except that Han characters (CJK ideographs, simplified and traditional
  alike) never glue to other word characters: a Han run is a token source of its own.
- English path (every non-Han run, in any language setting): Lucene-style possessive removal ("cell's" -> "cell"),
  then the stopword filter on the lowercased surface form, then the stemmer (Lucene's order).
- Chinese path (Han runs): jieba search mode (``lcut_for_search``: the words of the accurate cut plus their
  dictionary sub-words), with an optional user dictionary. No stemming and no stopwords.
- ``language``: "auto" (default) and "zh" send Han runs to jieba and the rest to the English path, so a text
  that mixes scripts is handled, and the same word tokenises the same way in a query and in a document whatever
  the rest of either text is. "auto" loads jieba only when a text holds Han characters; "zh" loads it at once
  (and so reports a bad dictionary at construction). "en" never uses jieba:
  each Han character becomes a token of its own (what Lucene's StandardTokenizer does with CJK).
  :func:`detect_language` (share of Han characters) says what a text is, for reports and for choosing a
  setting; the tokenizer never switches per text on it, because a per-text switch would tokenise "北京"
  differently in an English query and in a Chinese document.

No global state: each :class:`Tokenizer` owns its stemmer, stem cache and jieba instance (jieba's cache file
goes to ``cache_dir / "jieba"``).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import jieba
import numpy as np
import Stemmer

from lab.core.cache import Memo
from lab.core.errors import ConfigError
from lab.core.progress import progress

# --- scripts ---------------------------------------------------------------------------------------------

#: Han ideographs: 〇, Extension A, the Unified block, Compatibility Ideographs, and planes 2-3 (Ext. B-H).
HAN_CHARS = "\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"
#: A run of Han characters / one Han character (also used by lab.retrievers.entities).
HAN_RUN = re.compile(f"[{HAN_CHARS}]+")
HAN_CHAR = re.compile(f"[{HAN_CHARS}]")
#: A word run that is not Han (``\w`` minus Han), or a Han run; group 1 is set for Han runs.
_TOKEN = re.compile(f"([{HAN_CHARS}]+)|[^\\W{HAN_CHARS}]+")
_WORD = re.compile(f"[^\\W{HAN_CHARS}]+")
#: Lucene EnglishPossessiveFilter: a trailing 's (straight or curly apostrophe) is dropped.
_POSSESSIVE = re.compile(r"(\w)['\u2019]s\b")
_ASCII_WORD = re.compile(r"\w+")

LANGUAGES = ("auto", "en", "zh")

# --- stopwords -------------------------------------------------------------------------------------------

#: Lucene's English stop set (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``, 33 words), the default of
#: Anserini/Pyserini (so of the Pyserini BEIR baselines) and bm25s' ``STOPWORDS_EN``.
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)

#: NLTK's English stopword corpus (179 words; bm25s ships it as ``STOPWORDS_EN_PLUS``), less the 26 forms with
#: an apostrophe ("don't", "it's", ...), which can never be a ``\w+`` token; their pieces ("don", "t", "s")
#: are in the list.
NLTK_STOPWORDS = frozenset(
    "a about above after again against ain all am an and any are aren as at be because been before being below "
    "between both but by can couldn d did didn do does doesn doing don down during each few for from further had "
    "hadn has hasn have haven having he her here hers herself him himself his how i if in into is isn it its "
    "itself just ll m ma me mightn more most mustn my myself needn no nor not now o of off on once only or other "
    "our ours ourselves out over own re s same shan she should shouldn so some such t than that the their theirs "
    "them themselves then there these they this those through to too under until up ve very was wasn we were "
    "weren what when where which while who whom why will with won wouldn y you your yours yourself yourselves"
    .split()
)

STOPWORD_LISTS = {"lucene": LUCENE_STOPWORDS, "nltk": NLTK_STOPWORDS}

#: Stemmers by name: PyStemmer (Snowball) algorithms. "english" is Snowball English (Porter2); "porter" is
#: the original Porter algorithm, the stemmer of Lucene's EnglishAnalyzer and of the Pyserini BEIR indexes.
STEMMERS = ("english", "porter")


def han_share(text: str) -> float:
    """Share of Han characters among the word characters of ``text`` (0.0 for a text without words)."""
    if text.isascii():
        return 0.0
    han = len(HAN_CHAR.findall(text))
    other = sum(len(w) for w in _WORD.findall(text))
    return han / (han + other) if han + other else 0.0


def detect_language(text: str, threshold: float = 0.3) -> str:
    """"zh" when at least ``threshold`` of the word characters are Han, else "en" (script-based, no model)."""
    return "zh" if han_share(text) >= threshold else "en"


def _resolve_stopwords(stopwords: Any) -> tuple[str | None, frozenset[str]]:
    """Map the ``stopwords`` option to (name for logging, set). Accepts a list name, None/False, or words."""
    if stopwords is None or stopwords is False:
        return None, frozenset()
    if stopwords is True:
        stopwords = "lucene"
    if isinstance(stopwords, str):
        if stopwords not in STOPWORD_LISTS:
            raise ConfigError(
                f"stopwords={stopwords!r}: unknown list; use one of {sorted(STOPWORD_LISTS)}, None, or a list of words"
            )
        return stopwords, STOPWORD_LISTS[stopwords]
    words = frozenset(w.lower() for w in stopwords)
    digest = hashlib.sha256(" ".join(sorted(words)).encode()).hexdigest()[:12]
    return f"custom-{len(words)}-{digest}", words


def _resolve_stemmer(stem: bool | str) -> str | None:
    if stem is None or stem is False:
        return None
    if stem is True:
        return "english"
    if stem in STEMMERS:
        return stem
    raise ConfigError(f"stem={stem!r}: use True (Snowball English), 'porter', 'english' or False")


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


class Tokenizer:
    """Text -> list of tokens; see the module docstring for the conventions.

    Parameters
    - language: "auto" | "en" | "zh" (see module docstring).
    - stem: True / "english" (Snowball English, default), "porter", or False.
    - stopwords: "lucene" (default, 33 words), "nltk" (153), None, or an iterable of words.
    - user_dict: path to a jieba user dictionary (``word [freq] [tag]`` per line), loaded into this instance.
    - jieba_dict: path to a main jieba dictionary replacing the default (e.g. ``dict.txt.big`` for traditional
      Chinese); None keeps jieba's default.
    - cache_dir: folder for jieba's prefix-dictionary cache (``cache_dir / "jieba"``); None: ``.cache``.
    - normalize: Unicode normal form applied before lowercasing ("NFKC", default), or None.
    """

    def __init__(
        self,
        language: str = "auto",
        stem: bool | str = True,
        stopwords: Any = True,
        user_dict: str | os.PathLike[str] | None = None,
        jieba_dict: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        normalize: str | None = "NFKC",
    ) -> None:
        if language not in LANGUAGES:
            raise ConfigError(f"language={language!r}: use one of {', '.join(LANGUAGES)}")
        self.language = language
        self.stemmer_name = _resolve_stemmer(stem)
        self.stopwords_name, self.stopwords = _resolve_stopwords(stopwords)
        self.normalize = normalize
        self.cache_dir = Path(cache_dir) if cache_dir is not None else Path(".cache")
        self.user_dict = self._check_file(user_dict, "user_dict")
        self.jieba_dict = self._check_file(jieba_dict, "jieba_dict")
        if self.user_dict is not None and language == "en":
            raise ConfigError("user_dict is a jieba dictionary; it has no effect with language='en' "
                              "(use 'auto' or 'zh')")
        self._stemmer = None
        if self.stemmer_name:
            self._stemmer = Stemmer.Stemmer(self.stemmer_name)
        self._stems: dict[str, str] = {}
        self._jieba = None
        self._identity: str | None = None
        if language == "zh":
            self._jieba_tokenizer()  # fail early on a bad dictionary

    @staticmethod
    def _check_file(path: str | os.PathLike[str] | None, field: str) -> Path | None:
        if path is None:
            return None
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{field}={str(p)!r}: no such file; give the path of a jieba dictionary file")
        return p

    # -- Chinese -------------------------------------------------------------------------------------------
    def _jieba_tokenizer(self) -> Any:
        """This instance's jieba.Tokenizer, built on first use; its cache file lives in cache_dir/jieba."""
        if self._jieba is None:
            tk = jieba.Tokenizer(str(self.jieba_dict) if self.jieba_dict else jieba.DEFAULT_DICT)
            tmp = self.cache_dir / "jieba"
            tmp.mkdir(parents=True, exist_ok=True)
            # jieba names the cache file itself ("jieba.cache" for the default dictionary, "jieba.u<md5 of
            # path>.cache" for another), so a changed main dictionary never loads a stale cache.
            tk.tmp_dir = str(tmp)
            tk.initialize()
            if self.user_dict is not None:
                try:
                    tk.load_userdict(str(self.user_dict))
                except Exception as exc:  # jieba raises ValueError with the bad line
                    raise ConfigError(f"user_dict={str(self.user_dict)!r}: jieba could not read it: {exc}") from exc
            self._jieba = tk
        return self._jieba

    def _han_tokens(self, run: str) -> list[str]:
        if self.language == "en":
            return list(run)
        return [w for w in self._jieba_tokenizer().lcut_for_search(run) if w.strip()]

    # -- English -------------------------------------------------------------------------------------------
    def _prepare(self, text: str) -> str:
        if self.normalize and not text.isascii():
            text = unicodedata.normalize(self.normalize, text)  # type: ignore[arg-type]  # a form name, as documented
        text = text.lower()
        if "'" in text or "\u2019" in text:
            text = _POSSESSIVE.sub(r"\1", text)
        return text

    def _terms(self, words: list[str]) -> list[str]:
        """Stopword filter then stem, via one memo: surface word -> stem ("" for a stopword)."""
        return list(filter(None, self._stem_map(words)))

    def _stem_map(self, words: list[str]) -> list[str]:
        """Each word's term, "" for a stopword (the memo :meth:`_terms` filters)."""
        memo = self._stems
        missing: set[str] | list[str] = set(words).difference(memo)
        if missing:
            missing = list(missing)
            keep = [w for w in missing if w not in self.stopwords]
            memo.update(dict.fromkeys(missing, ""))
            if keep:
                memo.update(zip(keep, self._stemmer.stemWords(keep) if self._stemmer is not None else keep,
                                strict=True))
        return list(map(memo.__getitem__, words))

    def _text_tokens(self, text: str) -> list[str]:
        text = self._prepare(text)
        if text.isascii():
            return self._terms(_ASCII_WORD.findall(text))
        if not HAN_RUN.search(text):
            return self._terms(_WORD.findall(text))
        out = []
        for m in _TOKEN.finditer(text):  # Han runs are rare outside Chinese text; order kept
            if m.group(1):
                out.extend(self._han_tokens(m.group(1)))
            else:
                out.extend(self._terms([m.group(0)]))
        return out

    def token_spans(self, text: str) -> tuple[list[str], list[int], list[tuple[int, int]]] | None:
        """The tokens of ``text`` (as :meth:`__call__` gives them) with the char offset where each starts, and
        the open intervals ``(a, b)`` inside which a cut would change the tokens of the pieces; None when the
        tokens of a span of ``text`` cannot be read off the tokens of the whole text.

        Slice-safe texts: ASCII, or (no Han character, already in the ``normalize`` form, no capital sigma, whose
        lowercase depends on what follows it, and a lowercase of the same length). Then the tokenizer's text is
        ``text.lower()`` char for char, its tokens are its ``\\w`` runs less the "s" of each possessive match
        (the substitution only deletes "'s" before a non-word char, so it merges no runs), and a span
        ``[s, e)`` of ``text`` whose bounds lie in no interval (not inside a word run, not inside a possessive
        match) tokenises to exactly the tokens that start in it: :func:`corpus_positions` relies on this.
        """
        if text.isascii():
            low, word = text.lower(), _ASCII_WORD
        else:
            if self.normalize and not unicodedata.is_normalized(self.normalize, text):  # type: ignore[arg-type]
                return None
            low, word = text.lower(), _WORD
            if len(low) != len(text) or "\u03a3" in text or HAN_RUN.search(low):
                return None
        inside: list[tuple[int, int]] = []
        dropped: set[int] = set()
        if "'" in low or "\u2019" in low:
            for m in _POSSESSIVE.finditer(low):  # the matches re.sub replaces, in its order
                inside.append((m.start(), m.end()))
                dropped.add(m.end() - 1)
        spans = [m.span() for m in word.finditer(low)]
        inside.extend(sp for sp in spans if sp[1] - sp[0] > 1)
        spans = [sp for sp in spans if sp[0] not in dropped] if dropped else spans
        terms = self._stem_map([low[a:b] for a, b in spans])
        keep = [i for i, t in enumerate(terms) if t]
        return [terms[i] for i in keep], [spans[i][0] for i in keep], inside

    # -- public --------------------------------------------------------------------------------------------
    def __call__(self, text: str) -> list[str]:
        """Tokens of one text, in text order."""
        return self._text_tokens(text)

    def tokenize(self, texts: Sequence[str] | Iterable[str], show_progress: bool = False,
                 memo: bool = False) -> list[list[str]]:
        """Tokens of each text (same order as ``texts``). Each distinct word is stemmed once per Tokenizer.

        ``memo``: look each text up in :data:`TEXT_TOKENS` first (key: :attr:`identity` and the text's digest) and
        tokenise only the texts no tokenizer of the same identity has tokenised in this process (index texts that
        recur across the configs of a sweep: a chunk identical under several chunk sizes). Same tokens either way.
        """
        texts = list(texts)
        keys = [(self.identity, _digest(t)) for t in texts] if memo else []
        # None until tokenised; the memo holds tuples, turned back into lists below
        out: list[Any] = TEXT_TOKENS.get_many(keys) if memo else [None] * len(texts)
        todo = [i for i, tokens in enumerate(out) if tokens is None]
        enabled = show_progress and len(todo) > 2000
        for i in progress(todo, desc="tokenize", enabled=enabled):
            out[i] = self._text_tokens(texts[i])
        if memo:
            TEXT_TOKENS.put_many([keys[i] for i in todo], [tuple(out[i]) for i in todo])
            out = [list(tokens) for tokens in out]
        return out

    @property
    def identity(self) -> str:
        """What shapes this tokenizer's output, as one string (its :meth:`describe`, dictionaries by digest)."""
        if self._identity is None:
            self._identity = json.dumps(self.describe(), sort_keys=True)
        return self._identity

    def describe(self) -> dict[str, Any]:
        """What to log: language mode, stemmer, stopword list, dictionaries (with content digests)."""
        d = {
            "language": self.language,
            "stemmer": self.stemmer_name and f"snowball-{self.stemmer_name}",
            "stopwords": self.stopwords_name,
            "normalize": self.normalize,
            "han": "chars" if self.language == "en" else "jieba-search",
            "user_dict": None,
            "jieba_dict": None,
        }
        if self.user_dict is not None:
            d["user_dict"] = f"{self.user_dict.name}@{_file_digest(self.user_dict)}"
        if self.jieba_dict is not None:
            d["jieba_dict"] = f"{self.jieba_dict.name}@{_file_digest(self.jieba_dict)}"
        return d


#: Tokens of the texts tokenised with ``memo=True`` in this process, keyed by (tokenizer identity, text digest).
TEXT_TOKENS = Memo(max_items=500_000)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


@dataclass(frozen=True)
class CorpusPositions:
    """Every slice-safe text of a corpus tokenised once (:meth:`Tokenizer.token_spans`), as one positional index.

    The texts are laid end to end in one char coordinate (text i starts at ``offsets[i]``; one separator char
    between texts). ``starts``: the global char offset of every token, ascending (token index = position in it).
    ``term_indptr``/``term_pos``: for term id t (``vocab``), the indices of its tokens, ascending. ``eligible``: the
    texts that are slice-safe (the others have no tokens here). A cut at global offset p is safe unless some
    interval ``(cut_from[i], cut_to[i])`` holds it: ``cut_from`` ascending, ``cut_to`` the running max of the
    intervals' ends, so p is unsafe iff ``cut_to[k] > p`` for the last k with ``cut_from[k] < p``. Shared and
    read-only (kept in :data:`POSITIONS`).
    """

    vocab: dict[str, int]
    offsets: np.ndarray
    eligible: np.ndarray
    starts: np.ndarray
    term_indptr: np.ndarray
    term_pos: np.ndarray
    cut_from: np.ndarray
    cut_to: np.ndarray

    def safe(self, pos: np.ndarray) -> np.ndarray:
        """For each global char offset, whether a cut there keeps the tokens on each side (see the class)."""
        if not len(self.cut_from):
            return np.ones(len(pos), dtype=bool)
        k = np.searchsorted(self.cut_from, pos, "left") - 1
        return (k < 0) | (self.cut_to[np.maximum(k, 0)] <= pos)


#: :class:`CorpusPositions` built in this process, keyed by (tokenizer identity, digest of the texts).
POSITIONS = Memo(max_items=4)


def corpus_positions(tokenizer: Tokenizer, texts: Sequence[str]) -> CorpusPositions:
    """The positional index of ``texts`` under ``tokenizer`` (built once per process per tokenizer identity and
    texts: :data:`POSITIONS`). Configs that cut the same documents into different spans (a chunk-size grid) read
    each span's tokens from it instead of tokenising every span again."""
    h = hashlib.blake2b("".join(texts).encode("utf-8", "surrogatepass"), digest_size=16)
    h.update(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)).tobytes())  # where each text ends
    key = (tokenizer.identity, h.digest())
    found = POSITIONS.get_many([key])[0]
    if isinstance(found, CorpusPositions):
        return found
    vocab: dict[str, int] = {}
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    eligible = np.zeros(len(texts), dtype=bool)
    starts: list[np.ndarray] = []
    terms: list[list[str]] = []
    cuts: list[np.ndarray] = []
    for i, text in enumerate(texts):
        offsets[i + 1] = offsets[i] + len(text) + 1
        spans = tokenizer.token_spans(text)
        if spans is None:
            continue
        eligible[i] = True
        toks, begins, inside = spans
        terms.append(toks)
        starts.append(np.asarray(begins, dtype=np.int64) + offsets[i])
        cuts.append(np.asarray(inside, dtype=np.int64).reshape(-1, 2) + offsets[i])
    flat = [t for toks in terms for t in toks]
    for t in flat:
        if t not in vocab:
            vocab[t] = len(vocab)
    ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    term_pos = np.argsort(ids, kind="stable")
    term_indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(np.bincount(ids, minlength=len(vocab)), out=term_indptr[1:])
    cut = np.concatenate(cuts) if cuts else np.empty((0, 2), dtype=np.int64)
    cut = cut[np.argsort(cut[:, 0], kind="stable")]
    arrays = [offsets, eligible, np.concatenate(starts) if starts else np.empty(0, dtype=np.int64), term_indptr,
              term_pos, np.ascontiguousarray(cut[:, 0]), np.maximum.accumulate(cut[:, 1]) if len(cut) else cut[:, 1]]
    for a in arrays:
        a.flags.writeable = False
    out = CorpusPositions(vocab, *arrays)
    POSITIONS.put_many([key], [out])
    return out


def tokenize(texts: Sequence[str] | Iterable[str], language: str = "auto", **options: Any) -> list[list[str]]:
    """Tokens of each text with a fresh :class:`Tokenizer` (``options``: stem, stopwords, user_dict, ...)."""
    return Tokenizer(language=language, **options).tokenize(texts)
