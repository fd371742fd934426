"""lab.models.estimate: the estimate of an LLM step from a timed sample, with the packaged SmolLM2-135M on a few
short prompts (real calls, a few seconds), and when it is shown."""
from __future__ import annotations

import pytest

from lab.models import estimate as est_mod
from lab.models.estimate import (
    EstimatePolicy,
    StepEstimate,
    estimate_run,
    estimate_step,
    format_estimate,
    map_estimated,
    worth_showing,
)
from lab.models.llm import load_llm

PROMPTS = [f"Name one colour of a {thing}. Answer in one word." for thing in
           ("banana", "tomato", "sky", "leaf", "crow", "cloud")]
GEN = {"max_tokens": 6, "temperature": 0.0}


@pytest.fixture()
def llm(tmp_path):
    model = load_llm(None, cache_dir=tmp_path, progress=False)
    yield model
    model.close()


def test_estimate_step_times_a_sample_that_the_step_reuses(llm):
    est = estimate_step(llm, "colours", PROMPTS, sample=2, concurrency=1, **GEN)
    assert (est.calls, est.cached, est.sample, est.to_make) == (6, 0, 2, 6)
    assert est.sample_seconds > 0 and est.seconds == pytest.approx(est.sample_seconds / 2 * 6, abs=0.2)
    assert est.tokens is not None and est.tokens > 6 * 6  # the prompts' tokens and up to 6 answer tokens each
    assert llm.usage()["generated"] == 2
    assert [llm.is_cached(p, **GEN) for p in PROMPTS] == [True, True, False, False, False, False]
    again = estimate_step(llm, "colours", PROMPTS, sample=2, concurrency=1, **GEN)
    assert (again.cached, again.to_make, again.sample) == (2, 4, 2)
    assert "6 LLM calls (2 cached)" in again.line() and "timed sample of 2 calls" in again.line()
    # too few calls to make: no sample, nothing generated
    before = llm.usage()["generated"]
    none = estimate_step(llm, "colours", PROMPTS, min_calls=10, **GEN)
    assert none.seconds is None and none.sample == 0 and llm.usage()["generated"] == before
    assert none.line().endswith("not timed")


def test_map_estimated_asks_each_prompt_once_and_shows_the_estimate(llm, monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(est_mod, "SHOW_SECONDS", 0.0)  # show any estimate, however short
    out = map_estimated(llm, PROMPTS, "colours", EstimatePolicy(echo=lines.append), sample=2, concurrency=1,
                        progress=False, **GEN)
    assert len(out) == 6 and all(not c.cached for c in out)
    assert llm.usage()["calls"] == 6 and llm.usage()["generated"] == 6  # the sample is the step's first calls
    assert len(lines) == 1 and lines[0].startswith("estimate (colours): 6 LLM calls (0 cached), about ")
    # the same through the cache, and with min_calls: no estimate
    lines.clear()
    again = map_estimated(llm, PROMPTS, "colours", EstimatePolicy(echo=lines.append), min_calls=3, progress=False,
                          **GEN)
    assert [c.text for c in again] == [c.text for c in out] and lines == []


def test_when_an_estimate_is_shown():
    short = StepEstimate("s", 10, 0, sample=2, sample_seconds=1.0, seconds=5.0, tokens=100)
    long = StepEstimate("s", 1000, 10, sample=2, sample_seconds=1.0, seconds=495.0, tokens=10_000)
    assert not worth_showing(short) and worth_showing(short, dry_run=True) and worth_showing(long)
    assert "8.2 min" in long.line() and "10,000 tokens" in long.line()
    failed = StepEstimate("s", 10, 0, sample_error="LLMError: down")
    assert not worth_showing(failed) and worth_showing(failed, dry_run=True)  # the step reports its own failure
    assert "the timed sample failed (LLMError: down)" in failed.line()
    assert StepEstimate("s", 4, 4).line().endswith("nothing to generate")
    assert StepEstimate("s", 4, 1).to_dict()["to_make"] == 3


def test_estimate_from_the_timed_sample():
    """n / smoothed yield candidates (capped), calls and tokens per candidate as sampled, the cold time when the
    sample came from the cache."""
    usage = {"calls": 8, "prompt_tokens": 3000, "completion_tokens": 1000, "cold_seconds": 40.0, "cache_hits": 0}
    est = estimate_run(100, 1000, 8, 2, 40.0, usage)
    assert est["yield_estimate"] == 0.3 and est["candidates"] == 334 and est["calls"] == 334
    assert est["tokens"] == 334 * 500 and est["seconds"] == 334 * 5.0
    assert estimate_run(100, 200, 8, 0, 40.0, usage)["candidates"] == 200  # capped by max attempts
    cached = estimate_run(10, 100, 8, 7, 0.1, {**usage, "cache_hits": 8}, concurrency=2)
    assert cached["candidates"] == 13 and cached["seconds"] == 13 * 2.5  # cold 40 s / 2 slots / 8 candidates
    assert format_estimate(est).startswith("estimate: about 334 candidates, 334 LLM calls, 167,000 tokens, 27.8 min")
