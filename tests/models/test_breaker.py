"""lab.models.breaker: consecutive failed LLM calls trip the breaker; a success resets the count."""
from __future__ import annotations

import threading

import pytest

from lab.core.errors import ConfigError
from lab.models.breaker import DEFAULT_MAX_CONSECUTIVE_FAILURES, SKIPPED, EndpointDown, FailureBreaker, guarded_call
from lab.models.llm import LLMError


def test_trips_at_the_limit_of_consecutive_failures_and_check_raises_one_line():
    b = FailureBreaker(limit=2, what="generation")
    b.failure("HTTP 503: down\ntraceback line")
    assert not b.tripped
    b.check()  # not tripped: no error
    b.failure("HTTP 503: still down")
    assert b.tripped and b.failures == 2
    with pytest.raises(EndpointDown) as exc:
        b.check()
    assert str(exc.value) == ("generation stopped after 2 consecutive failed LLM calls (--max-consecutive-failures 2);"
                              " last error: HTTP 503: still down")
    assert exc.value.exit_code == 1


def test_a_success_resets_the_count_so_scattered_failures_never_trip():
    b = FailureBreaker(limit=2)
    for _ in range(5):
        b.failure("one bad prompt")
        b.success()
    assert not b.tripped and b.failures == 5 and b.consecutive == 0


def test_the_last_error_keeps_its_first_line_up_to_300_characters():
    b = FailureBreaker()
    b.failure("x" * 400 + "\nsecond line")
    assert b.last_error == "x" * 300
    b.failure("")
    assert b.last_error == ""
    b.skip()
    b.skip()
    assert b.skipped == 2 and b.limit == DEFAULT_MAX_CONSECUTIVE_FAILURES


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "3"])
def test_a_limit_that_is_not_an_integer_from_1_is_a_config_error(limit):
    with pytest.raises(ConfigError, match=r"max_consecutive_failures=.*: expected an integer >= 1"):
        FailureBreaker(limit=limit)


def test_counts_are_exact_across_threads():
    b = FailureBreaker(limit=10**6)

    def fail() -> None:
        for _ in range(1000):
            b.failure("e")

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b.failures == b.consecutive == 8000


def test_guarded_call_counts_failures_skips_after_the_trip_and_passes_fatal_errors_on():
    """The one loop of every LLM step: a result resets the count, an LLMError is returned and counted (described as
    the caller says), a tripped breaker skips the call without making it, and a fatal error is raised."""
    b, calls = FailureBreaker(2, "judging"), []

    def fail(status="HTTP 500"):
        calls.append(status)
        raise LLMError("http://127.0.0.1:9/v1", "boom", status)

    assert guarded_call(b, lambda: "yes") == ("yes", None) and b.consecutive == 0
    _, err = guarded_call(b, fail, describe=lambda e: f"{type(e).__name__}: {e}")
    assert isinstance(err, LLMError) and b.consecutive == 1 and b.last_error.startswith("LLMError: LLM endpoint")
    _, err = guarded_call(b, fail)
    assert b.tripped and b.last_error.startswith("LLM endpoint http://127.0.0.1:9/v1")
    assert guarded_call(b, fail) == (None, SKIPPED) and b.skipped == 1 and len(calls) == 2  # not called
    with pytest.raises(LLMError):
        guarded_call(FailureBreaker(2), lambda: fail("connection refused"),
                     fatal=lambda e: e.status == "connection refused")
    assert guarded_call(None, lambda: 3) == (3, None)
