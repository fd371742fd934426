"""Quality gates for generated question/answer pairs, and the report that counts them.

Gates, in funnel order (a candidate is dropped at the first gate it fails; every gate that can be checked is
checked on every candidate, so the report also says how often each one fails on its own):

``valid_json``        the model's text parsed into {"question": str, "answer": str} (strictly, or after the one
                      lenient repair of :func:`lab.testset.generate.parse_qa`, counted as ``repaired``)
``is_question``       ends with ``?``/``？`` or starts with an interrogative (what, how, which ...; 什么, 如何 ...);
                      one sentence, no numbered list, not cut off on a function word ("... output of ?")
``not_quiz``          not quiz-shaped (:func:`quiz_shaped`): "Which of the following ...", "Which of the options
                      ...", "true or false", lettered options (A) ... (B) ...; 以下哪 / 下列哪 / 哪一项 for Chinese
``no_passage_reference`` the question does not point at the text it was written from (:func:`passage_reference`):
                      "the given passage", "the above passage", "according to the text"; 上文 / 这段 / 给定的段落
``same_language``     the question is in the passage's language (lab.text.tokenize.detect_language: share of
                      Han characters): a Chinese passage needs a Chinese question, an English one an English question
``length``            question length in [min, max] words (Chinese: Han characters), answer non-empty and at most
                      ``max_answer_words`` words (chars / 2 for Chinese)
``no_repetition``     share of repeated word trigrams in question and answer at most ``max_repetition`` (a small
                      model looping on a phrase), and no repetition inside a token or identifier that the passage
                      does not hold itself (:func:`repeated_in_token`: "libffi_cif_cif_cif_", "abababab")
``no_markup``         no markup copied into the question or the answer (:func:`markup_in`: HTML tags, markdown
                      images, links, headings, emphasis, tables and code fences, reStructuredText directives and
                      roles, rule lines); inline `code` is allowed
``known_identifiers`` every identifier the question names (:func:`identifiers`: snake_case, pkg::name,
                      obj.attr, camelCase, name(), anything in `backticks`) occurs in the passage (case-insensitive):
                      no invented functions or options
``known_names``       every product or project name the question uses (:func:`names`: a capitalised word not
                      at its start, or a CamelCase / mixed-case token: PostgreSQL, MongoDB, Oracle) occurs somewhere
                      in the corpus (case-insensitive): no other database's name in a database manual. Checked
                      when the corpus's vocabulary is given (:func:`corpus_vocabulary`)
``low_overlap``       lexical overlap with the passage at most ``max_overlap``: the share of the question's content
                      terms (lab.text.tokenize.Tokenizer: stop words removed, Snowball stems; jieba words for Chinese)
                      that occur in the passage. The seed prompt asks for questions that do not copy the key words.
``answerable``        the answer is supported by the passage. Method "lexical" (default): at least
                      ``min_answer_support`` of the answer's content terms occur in the passage; an answer with
                      no content term ("a", ":{") fails. Method "llm": the
                      generating LLM (or another) is asked whether the passage supports the answer (yes/no).
                      Either way an answer that is not one fails (:func:`non_answer`): it repeats the question,
                      is itself a question, or is a bare number to a how/why question: a small model's usual echo.
``prose_evidence``    the evidence span the answer narrows to (lab.testset.spans.support_span) is prose, not only a
                      heading, an identifier or an id (lab.testset.spans.not_prose_span)
``evidence_not_stub``  the evidence span is not a stub (:func:`stub_evidence`): a "See also: ..." line, or one
                      line of under :data:`STUB_WORDS` words that is not a sentence (no full stop: a one-line
                      summary or caption)
``on_topic``          cosine similarity between question and passage at least ``min_similarity``: the question is
                      about this passage, not a generic one. The model (``topic_model``, default the packaged
                      multilingual-e5-small) is not the default dense retriever (all-MiniLM-L6-v2), so the gate
                      does not favour the questions that retriever finds; the report says which model it was
                      and whether it is the one under test.
``not_duplicate``     cosine similarity (same model) with every question accepted before it, and with every query
                      the source dataset already holds (leakage guard), below ``duplicate_threshold`` (greedy, in
                      candidate order).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import numpy as np

from lab.core.errors import ConfigError
from lab.metrics.stats import wilson_interval
from lab.text.tokenize import detect_language

GATES = ("valid_json", "is_question", "not_quiz", "no_passage_reference", "same_language", "length", "no_repetition",
         "no_markup", "known_identifiers", "known_names", "low_overlap", "answerable", "prose_evidence",
         "evidence_not_stub", "on_topic", "not_duplicate")
#: The packaged model of the on-topic and duplicate gates (multilingual: Chinese and English questions alike).
TOPIC_MODEL = "multilingual-e5-small"
ANSWERABILITY = ("lexical", "llm")

_EN_WH = frozenset("""what how which why when where who whom whose is are was were can could does do did should
    would will shall may might has have had""".split())
_ZH_Q = ("什么", "怎么", "怎样", "如何", "为什么", "为何", "哪", "几", "多少", "是否", "能否", "可否", "吗", "呢", "谁")
_WORDS = re.compile(r"\w+(?:[-'.]\w+)*", re.UNICODE)
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class GateConfig:
    """Thresholds of the gates (see the module docstring). Defaults were set on ord-qa with SmolLM2-135M; the
    similarity thresholds are for the default ``topic_model``: e5 cosines sit high (on 300 ord-qa candidates, a
    question against its own passage: median 0.876, quartiles 0.842-0.898; against another ord-qa passage: median
    0.802, 95th percentile 0.846), so set them again for another model (all-MiniLM-L6-v2: about 0.3 and 0.9)."""

    min_question_words: int = 4
    max_question_words: int = 40
    min_question_chars_zh: int = 6
    max_question_chars_zh: int = 80
    max_answer_words: int = 120
    max_repetition: float = 0.25
    max_overlap: float = 0.8
    answerability: str = "lexical"
    min_answer_support: float = 0.5
    min_similarity: float = 0.83
    duplicate_threshold: float = 0.95
    topic_model: str = TOPIC_MODEL

    def __post_init__(self):
        if self.answerability not in ANSWERABILITY:
            raise ConfigError(f"answerability={self.answerability!r}: use one of {ANSWERABILITY}")
        for name in ("max_repetition", "max_overlap", "min_answer_support", "min_similarity", "duplicate_threshold"):
            v = getattr(self, name)
            if not 0.0 <= float(v) <= 1.0:
                raise ConfigError(f"gate threshold {name}={v}: must lie in [0, 1]")

    def describe(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------------ pure checks
def words(text: str) -> list[str]:
    """Word tokens (letters, digits, inner - ' .), lower-cased; Han characters count one each."""
    return [w.lower() for w in _WORDS.findall(text)]


_ASKING = frozenset("what how why which who whom whose".split())
_ASKING_ZH = ("什么", "为什么", "为何", "如何", "怎么", "怎样", "哪", "是否", "能否")
_INVERTED = frozenset("do does did can could is are was were should would will".split())
_SUBJECTS = frozenset("you i we they".split())
_QUANTITY = frozenset("many much long old big large often far".split())
_LABEL = re.compile(r"^\s*(?:\d+[.)]\s*|(?:question|q|answer|a)\s*:\s*)", re.IGNORECASE)
_LETTERED = re.compile(r"[^\W\d_]{2}|[\u3400-\u4dbf\u4e00-\u9fff]", re.UNICODE)
#: How many opening words an answer may share with its question before it counts as an echo.
ECHO_OPENING = 5


def non_answer(question: str, answer: str) -> str | None:
    """Why the answer is no answer to the question, or None. The usual failures of a small model (SmolLM2-135M
    on the SQLite docs wrote each of them; with the answer first in the schema it often writes a question there
    and then copies it as the question):

    ``"echo"``      the answer holds the question's words in order, or opens with the same ``ECHO_OPENING``
                    words ("How to fix X?" -> "How to fix X, which ...");
    ``"question"``  the answer is itself a question: it ends with ? or ？, or opens like one (what, how, why,
                    which, who; "do you", "can I"; 为什么, 如何 ...; after a "1." or "Question:" label);
    ``"number"``    the answer holds no word, only numbers or dates ("3.16.2", "2022-12-28"), to a how/why
                    question that does not ask for a quantity ("How to fix X?"; "how many", "how long" may).
    """
    opening = _LABEL.sub("", answer.strip(), count=1)
    q, a = words(question), words(opening)
    if q and (" ".join(q) in " ".join(a) or (len(q) >= ECHO_OPENING and a[:ECHO_OPENING] == q[:ECHO_OPENING])):
        return "echo"
    if answer.strip().endswith(("?", "？")) or opening.startswith(_ASKING_ZH):
        return "question"
    if a and (a[0] in _ASKING or (len(a) > 1 and a[0] in _INVERTED and a[1] in _SUBJECTS)):
        return "question"
    if a and not _LETTERED.search(answer) and q[:1] in (["how"], ["why"]) and q[1:2] != [] \
            and not (q[0] == "how" and q[1] in _QUANTITY):
        return "number"
    return None


def answer_after_echo(question: str, answer: str) -> str:
    """The answer without a copy of the question at its start ("What is X? X is 140um." -> "X is 140um."), as
    Qwen2.5-Coder-0.5B often writes it; the answer unchanged when it does not open with the question, or when
    nothing with a word follows the copy (then :func:`non_answer` calls it an echo)."""
    head = question.strip().rstrip("?？.。 ").strip()
    opening = answer.lstrip()
    if not head or not opening.lower().startswith(head.lower()):
        return answer
    rest = opening[len(head):].lstrip("?？.。:：-–— \n\t")
    return rest if words(rest) else answer


def han_chars(text: str) -> int:
    return len(_HAN.findall(text))


_DANGLING = frozenset("the a an and or that which than its their this these".split())  # "based on?" is fine
_ENUMERATION = re.compile(r"(?:^|\s)\d+[.)]\s")
_SENTENCE_BREAK = re.compile(r"[.!?。！？]\s+[A-Z0-9\u4e00-\u9fff]")


def is_question(text: str, language: str = "en") -> bool:
    """True for one well-formed question: it ends with ? or ？ (or starts with an interrogative word in English /
    holds an interrogative particle in Chinese), is a single sentence (no sentence break, no numbered list inside),
    and does not end on a dangling function word ("... the output of ?": a question cut off)."""
    t = text.strip()
    if not t:
        return False
    body = t.rstrip("?？ ").strip()
    if _SENTENCE_BREAK.search(body) or _ENUMERATION.search(body):
        return False
    tail = words(body[-20:])
    if language != "zh" and tail and tail[-1] in _DANGLING:
        return False
    if t.endswith(("?", "？")):
        return True
    if language == "zh":
        return any(w in t for w in _ZH_Q)
    first = words(t[:40])
    return bool(first) and first[0] in _EN_WH and len(first) > 2 and t[-1] not in ".:;!"


def text_length(text: str, language: str = "en") -> int:
    """Words of ``text``; for Chinese, Han characters plus the words of the rest (English terms, numbers)."""
    if language == "zh":
        return han_chars(text) + len(words(_HAN.sub(" ", text)))
    return len(words(text))


def length_ok(question: str, answer: str, cfg: GateConfig, language: str = "en") -> bool:
    """Question length within bounds (words; Han characters for Chinese); answer present and not too long
    (``max_answer_words`` words; twice as many units for Chinese, where a unit is a character)."""
    if not answer.strip():
        return False
    nq, na = text_length(question, language), text_length(answer, language)
    if language == "zh":
        return cfg.min_question_chars_zh <= nq <= cfg.max_question_chars_zh and na <= 2 * cfg.max_answer_words
    return cfg.min_question_words <= nq <= cfg.max_question_words and na <= cfg.max_answer_words


def repetition(text: str, n: int = 3) -> float:
    """Share of word n-grams that repeat an earlier n-gram of the same text (0 for texts under n + 1 words)."""
    w = words(text) if not _HAN.search(text) else [c for c in re.sub(r"\s+", "", text)]
    grams = [tuple(w[i:i + n]) for i in range(len(w) - n + 1)]
    if len(grams) < 2:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


#: A unit of 2+ characters (with a letter) repeated 3+ times in a row inside a token ("cif_cif_cif_", "abababab"),
#: or a 3+ letter part repeated at once across an identifier separator ("cif_cif").
_TOKEN_LOOP = re.compile(r"(?i)((?=[0-9_.\-/:]*[a-z])[a-z0-9_.\-/:]{2,}?)\1{2,}"
                         r"|(?<![a-z0-9])([a-z][a-z0-9]{2,})[_.\-]\2(?![a-z0-9])")


def repeated_in_token(text: str, allowed: str = "") -> str | None:
    """The first repeated piece inside a token of ``text`` (see _TOKEN_LOOP) that ``allowed`` (the passage) does
    not contain; None when there is none. A small model looping inside an identifier writes these."""
    low = allowed.lower()
    for m in _TOKEN_LOOP.finditer(text):
        if m.group(0).lower() not in low:
            return m.group(0)
    return None


_MARKUP = [
    ("html tag",
     re.compile(r"(?i)</?(?:a|abbr|b|blockquote|br|code|details|div|em|footer|h[1-6]|header|hr|i|iframe|img|"
                            r"kbd|li|nav|ol|p|picture|pre|script|section|small|source|span|strong|style|sub|summary|"
                            r"sup|table|tbody|td|th|thead|tr|u|ul|video)(?:\s[^<>]*)?/?>")),
    ("markdown image or badge", re.compile(r"!\[[^\]]*\]\(")),
    ("markdown link", re.compile(r"\[[^\]]+\]\((?:https?:|/|#|\.)")),
    ("markdown heading", re.compile(r"(?m)^\s*#{1,6}\s")),
    ("emphasis", re.compile(r"\*\*[^*]+\*\*|__[^_\s][^_]*__")),
    ("code fence", re.compile(r"```|~~~")),
    ("table", re.compile(r"\|[^|\n]*\|[^|\n]*\||\|\s*:?-{3,}")),
    ("reStructuredText", re.compile(r"(?m)^\s*\.\. [a-z\-]+::|:[a-z]+:`|`[^`]+`_")),
    ("rule line", re.compile(r"[=\-*_~#]{4,}")),
]


def markup_in(text: str) -> str | None:
    """The kind of markup ``text`` holds (see _MARKUP), or None. Inline `code` in single backticks is not markup."""
    for kind, pattern in _MARKUP:
        if pattern.search(text):
            return kind
    return None


#: An identifier (see the known_identifiers gate): `code`, a name joined by _ :: -> or ., camelCase, or name().
_IDENTIFIER = re.compile(r"`([^`\n]+)`|(?<![\w.\-])([A-Za-z_]\w*(?:(?:::|->|\.|_)\w+)+)(?:\(\))?"
                         r"|(?<![\w.\-])([a-z]+[A-Z]\w*)|(?<![\w.\-])([A-Za-z_]\w*)\(\)")


def identifiers(text: str) -> list[str]:
    """The identifiers ``text`` names (see :data:`_IDENTIFIER`), in order; 3 letters or fewer ("e.g") are not."""
    found = (next(g for g in m.groups() if g) for m in _IDENTIFIER.finditer(text))
    return [i for i in found if len(re.sub(r"\W", "", i)) > 3]


def unknown_identifiers(question: str, passage: str) -> list[str]:
    """The identifiers of ``question`` that ``passage`` does not hold (case-insensitive; a `code` span passes
    when the passage holds it whole or each of its words)."""
    low = re.sub(r"\s+", " ", passage.lower())
    out = []
    for ident in identifiers(question):
        i = re.sub(r"\s+", " ", ident.strip().lower())
        if i not in low and not all(w in low for w in i.split()):
            out.append(ident)
    return out


def same_language(question: str, passage_language: str) -> bool:
    """True when the question's language (lab.text.tokenize.detect_language) is the passage's."""
    return detect_language(question) == ("zh" if passage_language == "zh" else "en")


def term_coverage(text: str, reference_terms: set[str], tokenizer) -> float:
    """Share of the distinct content terms of ``text`` (``tokenizer``: lab.text.tokenize.Tokenizer) found in
    ``reference_terms``; 1.0 when ``text`` has no content term (nothing new: treated as fully covered)."""
    terms = set(tokenizer(text))
    if not terms:
        return 1.0
    return len(terms & reference_terms) / len(terms)


def greedy_duplicates(vectors: np.ndarray, threshold: float, kept: np.ndarray | None = None) -> list[bool]:
    """For each row of ``vectors`` (L2-normalised, in candidate order), True when its cosine with an earlier kept
    row (or a row of ``kept``) is >= ``threshold``; rows that are not duplicates are kept for the next ones."""
    pool = [] if kept is None or not len(kept) else [np.asarray(kept, dtype=np.float32)]
    out = []
    for v in np.asarray(vectors, dtype=np.float32):
        mat = np.concatenate(pool) if pool else None
        dup = bool(mat is not None and float((mat @ v).max()) >= threshold)
        out.append(dup)
        if not dup:
            pool.append(v[None, :])
    return out


_QUIZ = re.compile(r"\bwhich\s+of\s+(?:the|these|those)\s+(?:following|options?|choices?|statements?|answers?|"
                   r"below|above)\b|\b(?:true\s+or\s+false)\b|\b(?:choose|select|pick)\s+the\s+(?:correct|right|"
                   r"best)\b|(?:^|\s)\(?[Aa][.)]\s.+\s\(?[Bb][.)]\s", re.IGNORECASE)
_QUIZ_ZH = ("以下哪", "下列哪", "哪一项", "哪个选项", "选择正确")
_PASSAGE_REF = re.compile(r"\b(?:the|this|that)\s+(?:given|above|following|provided|preceding|previous|same)\s+"
                          r"(?:passage|text|paragraph|excerpt|context|document|section|snippet)\b|"
                          r"\b(?:according\s+to|in|from|based\s+on)\s+(?:the|this)\s+(?:passage|text|excerpt|"
                          r"paragraph|snippet)\b", re.IGNORECASE)
_PASSAGE_REF_ZH = ("上文", "上述段落", "这段", "本段", "给定的段落", "给定段落", "以上段落", "文中", "原文")
#: A one-line span of fewer words than this that is not a sentence is a stub (the evidence_not_stub gate).
STUB_WORDS = 8
_SEE_ALSO = re.compile(r"^\s*(?:see\s+also|related\s+(?:topics|pages|links))\b", re.IGNORECASE)
_NAME = re.compile(r"\b[A-Za-z][A-Za-z0-9+#]*[A-Z][A-Za-z0-9+#]*\b|\b[A-Z][a-z0-9+#]{2,}\b")
_NAME_STOP = frozenset("""what how which why when where who whom whose is are was were can could does do did should
    would will shall may might has have had the a an in on of for to and or if i""".split())


def quiz_shaped(question: str) -> bool:
    """Whether the question is quiz-shaped ("Which of the following ...", lettered options; 以下哪 ...)."""
    return bool(_QUIZ.search(question)) or any(m in question for m in _QUIZ_ZH)


def passage_reference(question: str) -> str | None:
    """The words by which the question points at its source text ("the given passage", 上文), else None."""
    m = _PASSAGE_REF.search(question)
    if m:
        return m.group(0)
    return next((w for w in _PASSAGE_REF_ZH if w in question), None)


def corpus_vocabulary(texts: Iterable[str]) -> frozenset[str]:
    """Every word of ``texts``, lower-cased (for :func:`unknown_names`)."""
    vocab: set[str] = set()
    for t in texts:
        vocab.update(w.lower() for w in _WORDS.findall(t))
    return frozenset(vocab)


def names(question: str) -> list[str]:
    """The product or project names a question uses: mixed-case tokens (PostgreSQL, MongoDB, iOS) anywhere, and
    capitalised words (Oracle) except its first word; question words and articles are never names."""
    out = []
    for m in _NAME.finditer(question):
        w = m.group(0)
        if m.start() == len(question) - len(question.lstrip()) and w[1:].islower():
            continue  # the question's first word, capitalised as any first word is
        if w.lower() not in _NAME_STOP:
            out.append(w)
    return list(dict.fromkeys(out))


def unknown_names(question: str, vocabulary: frozenset[str]) -> list[str]:
    """The names of :func:`names` that no text of the corpus holds (``vocabulary``: :func:`corpus_vocabulary`)."""
    return [n for n in names(question) if not all(w.lower() in vocabulary for w in _WORDS.findall(n))]


def stub_evidence(span: str) -> str | None:
    """"see also" when the evidence span is a "See also: ..." line, "summary" when it is one line of under
    :data:`STUB_WORDS` words with no full stop (a caption or one-line summary, not a sentence), else None."""
    t = span.strip()
    if _SEE_ALSO.match(t):
        return "see also"
    if "\n" not in t and len(_WORDS.findall(t)) < STUB_WORDS and not re.search(r"[.!?。！？]\s*$", t) \
            and not _HAN.search(t):
        return "summary"
    return None


# ------------------------------------------------------------------------------------------------ report
@dataclass
class GateReport:
    """Counts of one generation (or filtering) run.

    ``candidates``: LLM outputs checked (one per attempt that was not retried); ``passed[g]`` / ``failed[g]``:
    how many candidates passed / failed gate g when checked (a gate is not checked after valid_json fails, and
    not_duplicate only on candidates that passed every other gate); ``dropped_at[g]``: candidates whose first
    failed gate was g; ``accepted``: candidates kept. ``repaired``: outputs parsed only after the lenient repair;
    ``retries``: extra generations after unparseable output; ``skipped_units``: passages never sent (too short);
    ``units_eligible``: passages that could be sent.
    """

    config: dict
    answerability_method: str = "lexical"
    candidates: int = 0
    accepted: int = 0
    repaired: int = 0
    retries: int = 0
    skipped_units: int = 0
    units_eligible: int = 0
    passed: dict = field(default_factory=lambda: dict.fromkeys(GATES, 0))
    failed: dict = field(default_factory=lambda: dict.fromkeys(GATES, 0))
    dropped_at: dict = field(default_factory=lambda: dict.fromkeys(GATES, 0))
    distributions: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def add(self, results: dict[str, bool | None]) -> str | None:
        """Count one candidate's gate results (True passed, False failed, None not checked); returns the first
        failed gate or None when it passed all."""
        self.candidates += 1
        first = None
        for g in GATES:
            r = results.get(g)
            if r is None:
                continue
            if r:
                self.passed[g] += 1
            else:
                self.failed[g] += 1
                first = first or g
        if first is None:
            self.accepted += 1
        else:
            self.dropped_at[first] += 1
        return first

    @property
    def yield_rate(self) -> float:
        return self.accepted / self.candidates if self.candidates else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["yield"] = self.yield_rate
        return d

    def metrics(self) -> dict[str, float]:
        """Flat numbers for MLflow: gate_<g>_passed / _failed / _dropped, candidates, accepted, yield, ..."""
        out = {"candidates": self.candidates, "accepted": self.accepted, "yield": self.yield_rate,
               "repaired": self.repaired, "retries": self.retries, "skipped_units": self.skipped_units,
               "units_eligible": self.units_eligible}
        for g in GATES:
            out[f"gate_{g}_passed"] = self.passed[g]
            out[f"gate_{g}_failed"] = self.failed[g]
            out[f"gate_{g}_dropped"] = self.dropped_at[g]
        for k, v in self.extra.items():
            if isinstance(v, (int, float)):
                out[k] = v
            elif isinstance(v, dict):  # counts by reason: skipped_not_prose_code, ...
                out.update({f"{k}_{kk}": vv for kk, vv in v.items() if isinstance(vv, (int, float))})
        return {k: float(v) for k, v in out.items()}

    def table(self) -> str:
        """The funnel as a fixed-width table (one line per gate)."""
        width = max(map(len, GATES))
        lines = [f"{'gate':<{width}} {'checked':>8} {'failed':>7} {'dropped here':>13} {'remaining':>10}"]
        remaining = self.candidates
        for g in GATES:
            checked = self.passed[g] + self.failed[g]
            remaining -= self.dropped_at[g]
            lines.append(f"{g:<{width}} {checked:>8} {self.failed[g]:>7} {self.dropped_at[g]:>13} {remaining:>10}")

        lo, hi = wilson_interval(self.accepted, self.candidates)
        lines.append(f"candidates {self.candidates}, accepted {self.accepted} (yield {self.yield_rate:.1%}, Wilson 95% "
                     f"{lo:.1%}-{hi:.1%}); repaired JSON {self.repaired}, retries {self.retries}, passages skipped "
                     f"(too short) {self.skipped_units} of {self.skipped_units + self.units_eligible}; "
                     f"answerability: {self.answerability_method}")
        if self.extra.get("question_types"):
            qt = self.extra["question_types"]
            lines.append("question types accepted / asked (target share): " + ", ".join(
                f"{t} {qt['accepted'][t]}/{qt['asked'][t]} ({qt['target'][t]:.0%})" for t in qt["target"]))
        if self.extra.get("difficulty"):
            lines.append("difficulty tiers: " + ", ".join(f"{k} {v}" for k, v in self.extra["difficulty"].items()))
        if any(self.extra.get("skipped_not_prose", {}).values()):
            lines.append("passages skipped before any LLM call as not prose: " + ", ".join(
                f"{k} {v}" for k, v in self.extra["skipped_not_prose"].items() if v))
        if "evidence_narrowed" in self.extra:
            lines.append(f"evidence spans: {self.extra['evidence_narrowed']} narrowed to the supporting sentences, "
                         f"{self.extra.get('evidence_whole_passage', 0)} the whole passage")
        if self.extra.get("topic_model_note"):
            lines.append(str(self.extra["topic_model_note"]))
        if self.extra.get("existing_queries_guarded"):
            lines.append(f"the dataset's {self.extra['existing_queries_guarded']} own queries were never shown to the "
                         f"model; {self.extra.get('dropped_as_existing_query', 0)} generated questions too close to "
                         "one of them were dropped")
        return "\n".join(lines)


def summarize(values: Iterable[float]) -> dict:
    """min / quartiles / max / mean of a list of numbers (for the report's distributions)."""
    v = np.asarray(list(values), dtype=float)
    if not v.size:
        return {"n": 0}
    q = np.quantile(v, [0, 0.25, 0.5, 0.75, 1])
    return {"n": int(v.size), "mean": round(float(v.mean()), 4), "min": round(float(q[0]), 4),
            "q1": round(float(q[1]), 4), "median": round(float(q[2]), 4), "q3": round(float(q[3]), 4),
            "max": round(float(q[4]), 4)}


def check_text_gates(question: str, answer: str, passage_terms: set[str], cfg: GateConfig, tokenizer,
                     language: str = "en", passage: str = "") -> tuple[dict[str, bool], dict[str, float]]:
    """The gates that need no model: is_question, not_quiz, no_passage_reference, same_language, length,
    no_repetition, no_markup, known_identifiers (only with ``passage``), low_overlap and lexical answerable (only when
    ``cfg.answerability == "lexical"``). ``passage``: the text the model saw (a repeated identifier it holds
    itself is not the model's loop). Returns (results, measured values)."""
    overlap = term_coverage(question, passage_terms, tokenizer)
    # an answer with no content term ("a", ":{", "the") holds nothing the passage could support: 0, not 1
    support = term_coverage(answer, passage_terms, tokenizer) if set(tokenizer(answer)) else 0.0
    rep = max(repetition(question), repetition(answer))
    loop = repeated_in_token(question, passage) or repeated_in_token(answer, passage)
    markup = markup_in(question) or markup_in(answer)
    unknown = unknown_identifiers(question, passage) if passage else []
    wrong = non_answer(question, answer)
    res = {"is_question": is_question(question, language), "not_quiz": not quiz_shaped(question),
           "no_passage_reference": passage_reference(question) is None,
           "same_language": same_language(question, language),
           "length": length_ok(question, answer, cfg, language),
           "no_repetition": rep <= cfg.max_repetition and loop is None, "no_markup": markup is None,
           "low_overlap": overlap <= cfg.max_overlap}
    if passage:
        res["known_identifiers"] = not unknown
    if cfg.answerability == "lexical":
        res["answerable"] = support >= cfg.min_answer_support and wrong is None
    return res, {"overlap": overlap, "answer_support": support, "non_answer": float(wrong is not None),
                 "repetition": 1.0 if loop else rep,
                 "token_repetition": float(loop is not None), "markup": float(markup is not None),
                 "unknown_identifiers": float(len(unknown))}


def first_failure(results: dict[str, bool | None], order: Sequence[str] = GATES) -> str | None:
    for g in order:
        if results.get(g) is False:
            return g
    return None
