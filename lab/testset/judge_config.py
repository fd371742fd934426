"""The one config of judging and judge-checking (:class:`JudgeConfig`): the pool `lab testset judge` grades, the
card drawn first, and what `lab testset judge-check` draws; checked before any work."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from lab.core.errors import ConfigError
from lab.data.labels import MIN_KAPPA  # the floor on the judge card's kappa (known relevant vs grade >= 2); one home
from lab.retrievers import available

GRAMMAR_MODES = ("fallback", "always", "never")


@dataclass
class JudgeConfig:
    """How a judge grades and what it is checked on: the settings of `lab testset judge` (the pool: ``strategies``,
    ``depth``, ``split``, ``max_queries``; the card drawn first: ``check_pairs`` known positives and as many
    negatives, ``min_kappa``) and of `lab testset judge-check` (``check_pairs`` is its ``--pairs``, ``strategies``
    rank the negatives); ``resamples``: bootstrap resamples of the card's kappa intervals."""

    strategies: Sequence[str] = ("bm25", "dense", "hybrid")
    depth: int = 10
    split: str = "test"
    max_queries: int | None = None
    max_passage_chars: int = 2000
    max_tokens: int = 32
    grammar: str = "fallback"
    seed: int = 0
    check_pairs: int = 20
    min_kappa: float = MIN_KAPPA
    resamples: int = 1000
    extra: dict = field(default_factory=dict)

    def check(self) -> None:
        if self.depth < 1:
            raise ConfigError(f"--depth {self.depth}: must be >= 1 (documents per strategy and query in the pool)")
        if not self.strategies:
            raise ConfigError("--strategies: name at least one strategy, e.g. bm25,dense,hybrid")
        known = set(available())
        bad = [s for s in self.strategies if s not in known]
        if bad:
            raise ConfigError(f"--strategies: unknown {', '.join(bad)}; known: {', '.join(sorted(known))}")
        if self.grammar not in GRAMMAR_MODES:
            raise ConfigError(f"--grammar {self.grammar!r}: choose one of {', '.join(GRAMMAR_MODES)}")
        if self.max_passage_chars < 100 or self.max_tokens < 8:
            raise ConfigError("--max-passage-chars must be >= 100 and --max-tokens >= 8")
        if self.max_queries is not None and self.max_queries < 1:
            raise ConfigError(f"--max-queries {self.max_queries}: must be >= 1")
        if self.check_pairs < 0:
            raise ConfigError(f"--check-pairs {self.check_pairs}: must be >= 0 (0 skips the judge check)")
        if not -1.0 <= self.min_kappa <= 1.0:
            raise ConfigError(f"--min-kappa {self.min_kappa}: a kappa lies in [-1, 1]")
