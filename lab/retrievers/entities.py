"""Entity extraction for knowledge-graph retrieval (the ``kg`` strategy): text -> normalised entity keys.

Extractors (``make_extractor(name, ...)``), all offline:

- ``"phrases"`` (English, no LLM, no model): RAKE-style candidate phrases. A text is cut into runs of content
  words at stopwords (NLTK's English list plus question and modal words, :data:`PHRASE_STOPWORDS`), at punctuation
  other than an in-word hyphen or apostrophe, at line breaks, at numbers and at one-character tokens. A run of up
  to ``max_words`` words is a phrase; with ``subphrases=True`` (default) every contiguous sub-phrase of up to
  ``max_words`` words is emitted too, so "global routing" in a query meets "global routing congestion" in a chunk.
  This is a stopword/punctuation chunker, not a noun-phrase parser: it has no part-of-speech tags (no offline
  tagger ships its model on PyPI without a download), so verbs and adjectives can become entities; the ``kg``
  strategy's document-frequency cap prunes the common ones. Code identifiers (``set_routing_alpha``) are single
  words, because ``\\w`` includes the underscore.
- ``"jieba"`` (Chinese): ``jieba.posseg`` words whose tag is a noun tag (``n``, ``nr``, ``nrfg``, ``nrt``, ``ns``,
  ``nt``, ``nz``, ``ng``) or ``eng`` (a Latin-script word); Han nouns need ``min_chars`` (2) characters. With
  ``compounds=True`` runs of adjacent nouns are also joined (up to 3 words: "北京 大学" -> "北京大学"). ``hmm``
  (default True) lets jieba find words missing from its dictionary (names); it makes posseg ~10x slower.
  The ``kg`` strategy caches both cheap extractors' output per text in :mod:`lab.core.cache` (:func:`cached_extract`).
- ``"llm"``: an LLM lists the entities (:data:`PROMPT`, versioned by :data:`PROMPT_VERSION`); the answer is parsed
  leniently (:func:`parse_entity_list`: lines, bullets, numbering, commas, back-ticked spans), items longer than
  ``max_item_words`` words are dropped, and with ``grounded=True`` (default) an item is kept only when its key
  occurs in the text's keys (so a weak model cannot invent entities). An answer with no usable item is a failure:
  counted, and the text gets the ``fallback`` extractor's entities instead ("phrases" or "jieba").

Normalisation (:func:`normalize_entity`): NFKC, lowercase; Han runs are kept whole (no jieba split, whitespace
inside them removed); every other part goes through :class:`lab.text.tokenize.Tokenizer` (English path: possessive "'s"
removed, Lucene stopwords dropped, Snowball English stem) and the words are joined by one space. A key with fewer
than 2 characters or no letter (pure numbers, punctuation) is dropped (""). So "Global Routers" and "global
router" share the key "global router", and a query and a chunk that name the same thing link.

An extractor returns the keys of a text unique, in first-seen order. No global state: each extractor owns its
tokenizer (and jieba instance).
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path
from typing import Sequence

import jieba
import jieba.posseg

from lab.core.errors import ConfigError
from lab.core.progress import progress as bar
from lab.retrievers.llmutil import llm_describe
from lab.text.tokenize import HAN_CHAR, HAN_RUN, NLTK_STOPWORDS, Tokenizer

#: Version of :data:`PROMPT` and of the answer parsing rules (an integer, as the other LLM strategies'); reported
#: by describe() as ``prompt_version``. Bump it when either changes.
PROMPT_VERSION = 1

PROMPT = ("List the key entities (names, technical terms, commands, tools, products, places) mentioned in the "
          "text. Write one entity per line, with no explanations.\n\nText:\n{text}\n\nEntities:")

EXTRACTORS = ("auto", "phrases", "jieba", "llm")

#: Version of the cheap extractors' rules; part of their cache identity: bump it when a rule changes, so cached
#: entity lists made by the old rules are not read back.
EXTRACTION_VERSION = "v1"

#: Words that end a candidate phrase: NLTK's English stopwords plus question, modal and filler words.
PHRASE_STOPWORDS = NLTK_STOPWORDS | frozenset(
    "also could would may might must shall one ones via e g eg ie etc us let lets please yes".split())

#: jieba.posseg tags kept by the "jieba" extractor: nouns (any tag starting with "n") and Latin-script words.
JIEBA_NOUN_PREFIX = "n"
JIEBA_LATIN_TAG = "eng"

#: A word (with in-word hyphens/apostrophes), a line break, or one other non-space character.
_PIECE = re.compile(r"(\w+(?:[-'\u2019]\w+)*)|(\n)|([^\w\s])")
_NUMBER = re.compile(r"^[\d.,_]+$")
_BULLET = re.compile(r"^\s*(?:[-*\u2022+>#]+|\(?\d{1,3}[.)\]:]|[a-zA-Z][.)])\s+")
_LABEL = re.compile(r"^\s*(?:the\s+)?(?:key\s+)?(?:entities|keywords|terms)\b[^:\n]{0,40}:\s*", re.IGNORECASE)
_BACKTICK = re.compile(r"`([^`\n]{1,80})`")
_ITEM_SPLIT = re.compile(r"[,;\uff0c\uff1b\u3001]|\s+\band\b\s+")
_STRIP = " \t\"'`*_()[]{}<>.:!?\u201c\u201d\u2018\u2019\u3002\uff1a"


# --------------------------------------------------------------------------------------------- normalisation
def normalizer_tokenizer(cache_dir: str | Path | None = None) -> Tokenizer:
    """The tokenizer :func:`normalize_entity` uses: English path only (Lucene stopwords, Snowball stem)."""
    return Tokenizer(language="en", stem=True, stopwords="lucene", cache_dir=cache_dir)


def normalize_entity(surface: str, tokenizer: Tokenizer) -> str:
    """The key of one entity surface form (see the module docstring); "" when nothing is left."""
    text = unicodedata.normalize("NFKC", surface or "").lower()
    parts: list[str] = []
    pos = 0
    for m in HAN_RUN.finditer(text):
        parts.extend(tokenizer(text[pos:m.start()]))
        parts.append(m.group(0))
        pos = m.end()
    parts.extend(tokenizer(text[pos:]))
    key = " ".join(parts)
    if len(key) < 2 or not any(ch.isalpha() for ch in key):
        return ""
    return key


def unique_keys(surfaces: Sequence[str], tokenizer: Tokenizer) -> list[str]:
    """Normalised keys of ``surfaces``, empty ones dropped, unique, in first-seen order."""
    out: dict[str, None] = {}
    for s in surfaces:
        key = normalize_entity(s, tokenizer)
        if key:
            out.setdefault(key, None)
    return list(out)


# --------------------------------------------------------------------------------------------- phrases
def phrase_runs(text: str, stopwords: frozenset = PHRASE_STOPWORDS) -> list[list[str]]:
    """Runs of content words (surface forms) of ``text``, cut at stopwords, punctuation (not in-word hyphens or
    apostrophes), line breaks, numbers and one-character words."""
    runs: list[list[str]] = []
    current: list[str] = []
    for m in _PIECE.finditer(unicodedata.normalize("NFKC", text or "")):
        word = m.group(1)
        low = word.lower() if word else ""
        if word and len(word) > 1 and not _NUMBER.match(word) and low not in stopwords \
                and re.sub(r"['\u2019]s$", "", low) not in stopwords:
            current.append(word)
            continue
        if current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def phrase_candidates(text: str, max_words: int = 3, subphrases: bool = True,
                      stopwords: frozenset = PHRASE_STOPWORDS) -> list[str]:
    """Candidate phrases (surface forms, space-joined) of ``text``: each run of at most ``max_words`` words, or
    (``subphrases``) every contiguous part of a run with 1..``max_words`` words; a longer run without
    ``subphrases`` gives its ``max_words``-word windows. Order: by run, longest first within a run."""
    if max_words < 1:
        raise ConfigError(f"phrases: max_words must be >= 1, got {max_words}")
    out: list[str] = []
    for run in phrase_runs(text, stopwords):
        n = len(run)
        if subphrases:
            sizes = range(min(n, max_words), 0, -1)
        else:
            sizes = [n] if n <= max_words else [max_words]
        for size in sizes:
            for i in range(n - size + 1):
                out.append(" ".join(run[i:i + size]))
    return out


# --------------------------------------------------------------------------------------------- jieba
def jieba_nouns(tagged: Sequence[tuple[str, str]], min_chars: int = 2, compounds: bool = True,
                max_compound: int = 3) -> list[str]:
    """Nouns among ``(word, tag)`` pairs from ``jieba.posseg``: tags starting with "n", or "eng"; a Han word needs
    ``min_chars`` characters, a Latin one 2. With ``compounds``, runs of adjacent nouns (2..``max_compound``
    words) are joined and emitted after their parts (Han words without a space, others with one)."""
    out: list[str] = []
    run: list[str] = []

    def flush():
        if compounds and len(run) > 1:
            for size in range(2, min(len(run), max_compound) + 1):
                for i in range(len(run) - size + 1):
                    parts = run[i:i + size]
                    joiner = "" if all(HAN_CHAR.search(p) for p in parts) else " "
                    out.append(joiner.join(parts))
        run.clear()

    for word, tag in tagged:
        word = word.strip()
        is_noun = bool(word) and (tag.startswith(JIEBA_NOUN_PREFIX) or tag == JIEBA_LATIN_TAG)
        if is_noun:
            need = min_chars if HAN_CHAR.search(word) else 2
            is_noun = len(word) >= need
        if is_noun:
            out.append(word)
            run.append(word)
        else:
            flush()
    flush()
    return out


# --------------------------------------------------------------------------------------------- LLM answers
def parse_entity_list(answer: str, max_item_words: int = 6, max_item_chars: int = 80) -> list[str]:
    """Items of an LLM's entity list, leniently: code fences dropped, one item per line or per comma/semicolon
    (Chinese list marks too), bullets, numbering, a leading "Entities:" label, quotes, markdown emphasis and
    trailing punctuation stripped; back-ticked spans inside a longer line are items of their own. Items with more
    than ``max_item_words`` words (Han text: more than ``max_item_chars`` // 4 characters) or more than
    ``max_item_chars`` characters are dropped (sentences, not entities). Unique, in order."""
    items: list[str] = []
    for line in (answer or "").splitlines():
        if line.strip().startswith("```"):
            continue
        line = _LABEL.sub("", _BULLET.sub("", line))
        ticked = _BACKTICK.findall(line)
        pieces = _ITEM_SPLIT.split(line)
        if ticked and not all(_fits(p.strip(_STRIP), max_item_words, max_item_chars) for p in pieces if p.strip()):
            pieces = ticked  # a sentence with `code` in it: keep the code spans only
        for piece in pieces:
            item = re.sub(r"\*\*|__", "", piece).strip(_STRIP)
            item = re.sub(r"\s+", " ", item)
            if item and _fits(item, max_item_words, max_item_chars):
                items.append(item)
    return list(dict.fromkeys(items))


def _fits(item: str, max_words: int, max_chars: int) -> bool:
    if not item or len(item) > max_chars:
        return False
    if HAN_CHAR.search(item):
        return len(item) <= max(4, max_chars // 4)
    return len(item.split()) <= max_words


def grounded(key: str, text_keys_joined: str, text_compact: str) -> bool:
    """Whether an entity key occurs in a text: its non-Han words as a contiguous word sequence of the text's
    normalised words (``text_keys_joined``: " w1 w2 ... ", with spaces at both ends), and each Han run as a
    substring of the text (``text_compact``: NFKC, lowercase, whitespace removed)."""
    han = HAN_RUN.findall(key)
    if any(h not in text_compact for h in han):
        return False
    latin = HAN_RUN.sub(" ", key).split()
    return not latin or f" {' '.join(latin)} " in text_keys_joined


# --------------------------------------------------------------------------------------------- extractors
class PhraseExtractor:
    """The "phrases" extractor (English): RAKE-style candidate phrases, normalised (module docstring)."""

    name = "phrases"
    last_debt = 0.0  # no LLM: no generation seconds to add to a query's latency (see LLMExtractor)
    cacheable = True  # 5-20 ms per passage on a shared core (SciFact: 5,183 passages, 20-100 s): worth a cache

    def __init__(self, max_words: int = 3, subphrases: bool = True, cache_dir: str | Path | None = None):
        if int(max_words) < 1:
            raise ConfigError(f"kg extractor 'phrases': max_words must be >= 1, got {max_words}")
        self.max_words, self.subphrases = int(max_words), bool(subphrases)
        self.tokenizer = normalizer_tokenizer(cache_dir)

    @property
    def identity(self) -> str:
        stop = hashlib.sha256(" ".join(sorted(PHRASE_STOPWORDS)).encode()).hexdigest()[:12]
        return (f"phrases-{EXTRACTION_VERSION}|max_words={self.max_words}|subphrases={self.subphrases}|stop={stop}"
                f"|{self.tokenizer.describe()}")

    def extract(self, text: str) -> list[str]:
        """Entity keys of one text."""
        return unique_keys(phrase_candidates(text, self.max_words, self.subphrases), self.tokenizer)

    def extract_many(self, texts: Sequence[str], progress: bool = False, desc: str = "kg entities") -> list[list[str]]:
        return [self.extract(t) for t in bar(list(texts), desc=desc, enabled=progress and len(texts) > 500)]

    def describe(self) -> dict:
        return {"extractor": self.name, "max_words": self.max_words, "subphrases": self.subphrases,
                "stopwords": f"nltk+{len(PHRASE_STOPWORDS) - len(NLTK_STOPWORDS)}",
                "normalizer": "nfkc-lower-lucene-stop-snowball"}


class JiebaNounExtractor:
    """The "jieba" extractor (Chinese): jieba.posseg nouns and Latin words, normalised (module docstring)."""

    name = "jieba"
    last_debt = 0.0  # no LLM: no generation seconds to add to a query's latency (see LLMExtractor)
    cacheable = True  # posseg with HMM: ~0.1 s per 500-character passage on a shared core

    def __init__(self, min_chars: int = 2, compounds: bool = True, hmm: bool = True,
                 user_dict: str | Path | None = None, cache_dir: str | Path | None = None):
        self.min_chars, self.compounds, self.hmm = int(min_chars), bool(compounds), bool(hmm)
        self.tokenizer = normalizer_tokenizer(cache_dir)
        # lab.text.tokenize's Tokenizer owns the jieba instance (cache file under cache_dir/jieba, optional user
        # dictionary)
        self._zh = Tokenizer(language="zh", stem=False, stopwords=None, user_dict=user_dict, cache_dir=cache_dir)
        self._posseg = jieba.posseg.POSTokenizer(self._zh._jieba_tokenizer())

    @property
    def identity(self) -> str:
        return (f"jieba-nouns-{EXTRACTION_VERSION}|jieba={jieba.__version__}|min_chars={self.min_chars}"
                f"|compounds={self.compounds}|hmm={self.hmm}|{self._zh.describe()}|{self.tokenizer.describe()}")

    def tagged(self, text: str) -> list[tuple[str, str]]:
        """(word, tag) pairs of jieba.posseg over the NFKC-normalised text."""
        text = unicodedata.normalize("NFKC", text or "")
        return [(p.word, p.flag) for p in self._posseg.cut(text, HMM=self.hmm)]

    def extract(self, text: str) -> list[str]:
        return unique_keys(jieba_nouns(self.tagged(text), self.min_chars, self.compounds), self.tokenizer)

    def extract_many(self, texts: Sequence[str], progress: bool = False, desc: str = "kg entities") -> list[list[str]]:
        return [self.extract(t) for t in bar(list(texts), desc=desc, enabled=progress and len(texts) > 50)]

    def describe(self) -> dict:
        return {"extractor": self.name, "min_chars": self.min_chars, "compounds": self.compounds, "hmm": self.hmm,
                "tags": "n*+eng", "normalizer": "nfkc-lower-lucene-stop-snowball"}


class LLMExtractor:
    """The "llm" extractor: the LLM lists entities, parsed leniently and grounded in the text; a text whose answer
    gives no usable entity gets the ``fallback`` extractor's entities (counted in ``stats``).

    ``max_chars``: the text is cut to this many characters in the prompt (a small model's context is short);
    ``max_tokens``: answer length. ``last_debt``: seconds to add to a query's measured latency for answers read
    from the cache (their original generation time minus the lookup time), so reruns report honest latency.
    """

    name = "llm"
    cacheable = False  # the LLM layer caches answers itself

    def __init__(self, llm, fallback, max_chars: int = 1000, max_tokens: int = 64, grounded: bool = True,
                 max_item_words: int = 6):
        self.llm, self.fallback = llm, fallback
        self.max_chars, self.max_tokens = int(max_chars), int(max_tokens)
        self.grounded, self.max_item_words = bool(grounded), int(max_item_words)
        self.tokenizer = fallback.tokenizer
        self.stats = {"texts": 0, "failures": 0, "items": 0, "items_kept": 0}
        self.last_debt = 0.0

    @property
    def identity(self) -> str:
        return f"llm|kg-entities-prompt-v{PROMPT_VERSION}|{self.llm.identity}|fallback={self.fallback.identity}"

    def prompt(self, text: str) -> str:
        """The prompt for one text (cut to ``max_chars`` characters)."""
        return PROMPT.format(text=(text or "")[: self.max_chars].strip())

    def entities_from_answer(self, answer: str, text: str) -> list[str]:
        """Keys of the answer's items (grounded in ``text`` when ``grounded``); updates the item counters."""
        items = parse_entity_list(answer, self.max_item_words)
        keys = unique_keys(items, self.tokenizer)
        if self.grounded:
            prepared = unicodedata.normalize("NFKC", text or "").lower()
            joined = f" {' '.join(self._words(prepared))} "
            compact = re.sub(r"\s+", "", prepared)
            keys = [k for k in keys if grounded(k, joined, compact)]
        self.stats["items"] += len(items)
        self.stats["items_kept"] += len(keys)
        return keys

    def _words(self, prepared: str) -> list[str]:
        out: list[str] = []
        pos = 0
        for m in HAN_RUN.finditer(prepared):
            out.extend(self.tokenizer(prepared[pos:m.start()]))
            pos = m.end()
        out.extend(self.tokenizer(prepared[pos:]))
        return out

    def _finish(self, completion, text: str) -> list[str]:
        self.stats["texts"] += 1
        keys = self.entities_from_answer(completion.text, text)
        if keys:
            return keys
        self.stats["failures"] += 1
        return self.fallback.extract(text)

    def extract(self, text: str) -> list[str]:
        """Entities of one text (a query): one LLM call; ``last_debt`` is set for latency accounting."""
        c = self.llm.complete(self.prompt(text), max_tokens=self.max_tokens)
        self.last_debt = max(0.0, c.gen_seconds - c.seconds) if c.cached else 0.0
        return self._finish(c, text)

    def extract_many(self, texts: Sequence[str], progress: bool = False, desc: str = "kg entities (llm)"
                     ) -> list[list[str]]:
        texts = list(texts)
        answers = self.llm.map([self.prompt(t) for t in texts], progress=progress, desc=desc,
                               max_tokens=self.max_tokens)
        return [self._finish(c, t) for c, t in zip(answers, texts, strict=True)]

    def describe(self) -> dict:
        return {"extractor": self.name, "prompt_version": PROMPT_VERSION, **llm_describe(self.llm),
                "max_chars": self.max_chars, "max_tokens": self.max_tokens, "grounded": self.grounded,
                "fallback": self.fallback.describe(), "llm_texts": self.stats["texts"],
                "llm_failures": self.stats["failures"], "llm_items": self.stats["items"],
                "llm_items_kept": self.stats["items_kept"]}


def make_extractor(name: str, *, llm=None, fallback: str = "phrases", cache_dir: str | Path | None = None,
                   options: dict | None = None):
    """An extractor by name: "phrases", "jieba" or "llm" (``llm``: an LLM object; ``fallback``: "phrases" or
    "jieba", also the extractor whose normaliser the LLM's items go through). ``options``: keyword arguments of the
    extractor class (PhraseExtractor: max_words, subphrases; JiebaNounExtractor: min_chars, compounds, hmm,
    user_dict; LLMExtractor: max_chars, max_tokens, grounded, max_item_words)."""
    options = dict(options or {})
    try:
        if name == "phrases":
            return PhraseExtractor(cache_dir=cache_dir, **options)
        if name == "jieba":
            return JiebaNounExtractor(cache_dir=cache_dir, **options)
        if name == "llm":
            if llm is None:
                raise ConfigError("kg extractor 'llm' needs an LLM object")
            if fallback not in ("phrases", "jieba"):
                raise ConfigError(f"kg extractor 'llm': fallback must be 'phrases' or 'jieba', not {fallback!r}")
            return LLMExtractor(llm, make_extractor(fallback, cache_dir=cache_dir), **options)
    except TypeError as e:
        raise ConfigError(f"kg extractor {name!r}: bad option in {sorted(options)}: {e}") from None
    raise ConfigError(f"kg: unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}")


def cached_extract(extractor, texts: Sequence[str], cache=None, progress: bool = False,
                   desc: str = "kg entities") -> list[list[str]]:
    """``extractor.extract_many(texts)`` through :class:`lab.core.cache.Cache` when the extractor is ``cacheable`` and a
    cache is given: key ``content_key("kg:entities", extractor.identity, text)``, value the JSON list of keys."""
    texts = list(texts)
    if cache is None or not getattr(extractor, "cacheable", False):
        return extractor.extract_many(texts, progress=progress, desc=desc)
    keys = [cache.key("kg:entities", extractor.identity, t) for t in texts]
    out: list[list[str] | None] = [cache.get_json(k) for k in keys]
    missing = [i for i, v in enumerate(out) if v is None]
    if missing:
        fresh = extractor.extract_many([texts[i] for i in missing], progress=progress, desc=desc)
        for i, ents in zip(missing, fresh, strict=True):
            cache.put_json(keys[i], ents)
            out[i] = ents
    return out  # type: ignore[return-value]
