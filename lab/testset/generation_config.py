"""The settings of one generation (:class:`GenerationConfig`): how many questions, how passages are sampled, the
retries, the schema's order and the gates' thresholds; checked before any work (one ConfigError naming the field)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lab.core.errors import ConfigError
from lab.testset.gates import GateConfig

STRATIFY = ("doc", "section", "none")
JSON_MODES = ("schema", "prompt")
#: What a retry is for: "parse", an answer that did not parse; "text_gates", also one that failed a gate needing no
#: model (lab.testset.gates.check_text_gates): under a grammar every answer parses, so a degenerate one would
#: otherwise get no second sample.
RETRY_ON = ("parse", "text_gates")
#: Which field the JSON schema has the model write first (llama.cpp's grammar keeps the schema's key order).
#: "question" (default): an instruction-tuned model told to write {"question", "answer"} puts its question into a
#: first "answer" field (Qwen2.5-Coder-0.5B on the SQLite docs, answer first: 6 of 8 answers were its question, 0
#: passed; question first: 100 questions in 15 min 24 s), and SmolLM2-135M writes 100 SQLite questions in 13 min
#: question first against 36 min answer first. Answer first, SmolLM2's answers were supported by the passage more
#: often (ord-qa) and its hand grades a little better (2 / 9 / 19 against 0 / 6 / 24 good / weak / bad of 30:
#: both mostly bad; docs/results.md, "The offline question writer on the SQLite docs").
WRITE_FIRST = ("answer", "question")


@dataclass(frozen=True)
class GenerationConfig:
    """Params of a generation run (all logged). ``max_attempts`` None: ``10 * n``."""

    n: int = 100
    seed: int = 0
    stratify: str = "section"
    grade: int = 1
    max_attempts: int | None = None
    rounds: int = 3
    retries: int = 3
    retry_on: str = "text_gates"  # see RETRY_ON
    round_temperature: float = 0.7
    retry_temperature: float = 0.7
    max_tokens: int = 200
    max_passage_chars: int = 1000
    min_passage_words: int = 25
    prose_only: bool = True  # windows that are mostly code, headings, ids or boilerplate are never sent
    json_mode: str = "schema"
    write_first: str = "question"  # see WRITE_FIRST
    batch_size: int = 8
    extra_relevant: bool = False
    extra_candidates: int = 5
    extra_grade: int = 1
    gates: GateConfig = field(default_factory=GateConfig)
    max_consecutive_failures: int = 3  # LLM calls failed in a row (after their retries) that stop the run

    def __post_init__(self):
        if self.n < 1:
            raise ConfigError(f"n={self.n}: ask for at least one question")
        if self.stratify not in STRATIFY:
            raise ConfigError(f"stratify={self.stratify!r}: use one of {STRATIFY}")
        if self.retry_on not in RETRY_ON:
            raise ConfigError(f"retry_on={self.retry_on!r}: use one of {RETRY_ON}")
        if self.write_first not in WRITE_FIRST:
            raise ConfigError(f"write_first={self.write_first!r}: use one of {WRITE_FIRST}")
        if self.json_mode not in JSON_MODES:
            raise ConfigError(f"json_mode={self.json_mode!r}: use one of {JSON_MODES}")
        if not 0 <= self.grade <= 3 or not 0 <= self.extra_grade <= 3:
            raise ConfigError(f"grades must lie in 0..3, got grade={self.grade}, extra_grade={self.extra_grade}")
        if self.rounds < 1 or self.retries < 0 or self.batch_size < 1:
            raise ConfigError("rounds and batch_size must be >= 1, retries >= 0")
        if isinstance(self.max_consecutive_failures, bool) or not isinstance(self.max_consecutive_failures, int) \
                or self.max_consecutive_failures < 1:
            raise ConfigError(f"max_consecutive_failures={self.max_consecutive_failures!r}: expected an integer >= 1")
        if self.max_passage_chars < 200:
            raise ConfigError(f"max_passage_chars={self.max_passage_chars}: passages need at least 200 characters "
                              "(default 1000)")
        if self.min_passage_words < 0:
            raise ConfigError(f"min_passage_words={self.min_passage_words}: must be >= 0 (default 25)")

    @property
    def attempts_cap(self) -> int:
        return int(self.max_attempts) if self.max_attempts else 10 * self.n

    def describe(self) -> dict:
        d = asdict(self)
        d["max_attempts"] = self.attempts_cap
        return d


# ------------------------------------------------------------------------------------------------ generation
