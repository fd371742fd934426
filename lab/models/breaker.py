"""Stop a long series of LLM calls when the endpoint is down: a breaker over consecutive failures.

A generation or judging run makes hundreds of calls; each failing call already retried with backoff (see
:mod:`lab.models.llm`), so an endpoint that always fails would otherwise cost every call its retries (about 600
requests for a 100-question test set). :class:`FailureBreaker` counts consecutive calls that failed for good
(an :class:`lab.models.llm.LLMError`); at ``limit`` it trips: calls not yet started are skipped and
:meth:`FailureBreaker.check` raises :class:`EndpointDown`, one line naming the endpoint's last error and the limit.
A success resets the count, so scattered failures (one bad prompt) never trip it. Thread-safe.

The caller keeps what was finished before the trip (writes it) and says where in the error (see
lab.testset.generate and lab.analysis.answer_metrics).
"""
from __future__ import annotations

import threading
from typing import Callable, TypeVar

from lab.core.errors import ConfigError, LabError
from lab.models.llm import LLMError

T = TypeVar("T")

#: The error of a call that was never made because the breaker had tripped.
SKIPPED = "skipped: the endpoint failed too many calls in a row"

#: Default number of consecutive failed calls that stops a run (the CLI's --max-consecutive-failures).
DEFAULT_MAX_CONSECUTIVE_FAILURES = 3


class EndpointDown(LabError):
    """An LLM endpoint failed ``limit`` calls in a row; the run stopped. Not bad input: the CLI exits 1."""

    exit_code = 1


class FailureBreaker:
    """Counts consecutive failed calls; trips at ``limit`` (see the module docstring)."""

    def __init__(self, limit: int = DEFAULT_MAX_CONSECUTIVE_FAILURES, what: str = "LLM calls"):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"max_consecutive_failures={limit!r}: expected an integer >= 1")
        self.limit, self.what = limit, what
        self.consecutive = self.failures = self.skipped = 0
        self.last_error = ""
        self._lock = threading.Lock()

    @property
    def tripped(self) -> bool:
        return self.consecutive >= self.limit

    def success(self) -> None:
        with self._lock:
            self.consecutive = 0

    def failure(self, error: str) -> None:
        with self._lock:
            self.consecutive += 1
            self.failures += 1
            self.last_error = str(error).splitlines()[0][:300] if error else ""

    def skip(self) -> None:
        with self._lock:
            self.skipped += 1

    def message(self) -> str:
        return (f"{self.what} stopped after {self.consecutive} consecutive failed LLM calls "
                f"(--max-consecutive-failures {self.limit}); last error: {self.last_error}")

    def check(self) -> None:
        """Raise :class:`EndpointDown` when tripped."""
        if self.tripped:
            raise EndpointDown(self.message())


def guarded_call(breaker: FailureBreaker | None, call: Callable[[], T], *,
                 describe: Callable[[LLMError], str] = str,
                 fatal: Callable[[LLMError], bool] = lambda e: False) -> tuple[T | None, LLMError | str | None]:
    """One LLM call under ``breaker`` (None: no breaker), the loop every LLM step runs its calls through (generation,
    judging, answer metrics): ``(call(), None)``; ``(None, SKIPPED)`` without calling once the breaker has tripped;
    ``(None, the LLMError)`` when the call failed for good, counted by the breaker as ``describe(error)``
    (``fatal(error)`` True: raised instead, e.g. a refused connection). A success resets the breaker's count.
    The caller runs :meth:`FailureBreaker.check` after its batch, so what finished before a trip is kept."""
    if breaker is not None and breaker.tripped:
        breaker.skip()
        return None, SKIPPED
    try:
        result = call()
    except LLMError as e:
        if fatal(e):
            raise
        if breaker is not None:
            breaker.failure(describe(e))
        return None, e
    if breaker is not None:
        breaker.success()
    return result, None
