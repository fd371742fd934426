"""What an LLM step will cost before it runs: calls, tokens and time, from a short timed sample.

Used before the long LLM steps (``lab testset judge`` and ``judge-check``, the contextual and QnA index builds):
the estimate is printed when the step will take more than :data:`SHOW_SECONDS`, and alone with ``--dry-run``.

Conventions
- Calls: one per prompt the step will send. Prompts the response cache of lab.models.llm answers already, and
  repeats of an earlier prompt of the step, cost nothing and are counted apart (``cached``). Calls a step makes
  again (a grammar fallback, a prompt refitted after a context overflow) are not foreseen: the figures are for the
  first pass.
- Timed sample: the first ``sample`` prompts not in the cache (at least as many as the LLM's concurrency, so every
  slot works), answered with the step's generation params. :func:`map_estimated` (a step that sends its prompts
  with ``llm.map``: the index builds) answers the step's first prompts as the sample, estimates, then the rest: no
  prompt is asked twice. :func:`estimate_step` (a step that sends them its own way: the judge, with its grammar
  fallback and failure breaker) answers the sample before the step starts; the answers land in the cache and the
  step reads them back (counted there as cache hits). Seconds per call: the sample's wall time, minus the time
  spent loading a local model, over its calls (so parallel slots count as far as the sample shows them). Tokens per
  call: prompt plus completion tokens of the sample's answers over the answers generated.
- A run whose calls depend on a yield (``lab testset generate``: candidates until ``n`` pass) is estimated from its
  first batch instead (:func:`estimate_run`): candidates = ``n`` over the smoothed yield, calls, tokens and seconds
  per candidate as in that batch.
- The step: ``seconds`` = calls to make (not cached) x seconds per call, sample included; ``tokens`` likewise.
  Without a sample (nothing to generate, fewer calls than ``min_calls``, or the sample failed) ``seconds`` and
  ``tokens`` are None and the line says why.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from lab.models.llm import LLMError, Message

#: A step estimated to take longer than this (seconds) prints its estimate before it starts.
SHOW_SECONDS = 60.0
#: Prompts answered now to time a step (at least the LLM's concurrency).
SAMPLE_CALLS = 3


@dataclass(frozen=True)
class StepEstimate:
    """The estimate of one LLM step (see the module docstring). ``sample_error``: why the sample failed ("" when
    it did not)."""

    step: str
    calls: int
    cached: int
    sample: int = 0
    sample_seconds: float = 0.0
    seconds: float | None = None
    tokens: int | None = None
    sample_error: str = ""

    @property
    def to_make(self) -> int:
        """Calls that will be generated (not answered by the cache)."""
        return self.calls - self.cached

    def to_dict(self) -> dict[str, Any]:
        """Plain fields for JSON."""
        return {**asdict(self), "to_make": self.to_make}

    def line(self) -> str:
        """One line: ``estimate (STEP): N LLM calls (C cached), about T tokens, M min (timed sample ...)``."""
        head = f"estimate ({self.step}): {self.calls:,} LLM calls ({self.cached:,} cached)"
        if self.to_make == 0:
            return head + ": nothing to generate"
        if self.sample_error:
            return head + f", time unknown: the timed sample failed ({self.sample_error})"
        if self.seconds is None:
            return head + ", not timed"
        tokens = "" if self.tokens is None else f", about {self.tokens:,} tokens"
        return (head + f"{tokens}, {_duration(self.seconds)} (from a timed sample of {self.sample} calls: "
                f"{self.sample_seconds:.1f} s)")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def not_cached(llm, prompts: Sequence[str | Sequence[Message]], **gen) -> list[int]:
    """The positions of the prompts the step will have generated: not in the LLM's cache (with these generation
    params) and not a repeat of an earlier prompt of the step (a repeat is read from the cache)."""
    seen: set[str] = set()
    out = []
    for i, p in enumerate(prompts):
        key = p if isinstance(p, str) else repr([sorted(m.items()) for m in p])
        if key not in seen and not llm.is_cached(p, **gen):
            out.append(i)
        seen.add(key)
    return out


def extrapolate(step: str, calls: int, cached: int, sample: int, before: Mapping[str, float],
                after: Mapping[str, float], wall: float) -> StepEstimate:
    """The estimate from a timed sample of ``sample`` generated calls: ``before`` / ``after`` the LLM's
    ``usage()`` around it, ``wall`` its wall time (seconds; a local model's loading is taken out here)."""
    wall = max(0.0, wall - (after.get("load_seconds", 0.0) - before.get("load_seconds", 0.0)))
    generated = after.get("generated", 0) - before.get("generated", 0)
    tokens = (after.get("prompt_tokens", 0) + after.get("completion_tokens", 0)
              - before.get("prompt_tokens", 0) - before.get("completion_tokens", 0))
    to_make = calls - cached
    return StepEstimate(step, calls, cached, sample=sample, sample_seconds=round(wall, 2),
                        seconds=round(wall / max(sample, 1) * to_make, 1),
                        tokens=round(tokens / generated * to_make) if generated else None)


def estimate_step(llm, step: str, prompts: Sequence[str | Sequence[Message]], *, sample: int = SAMPLE_CALLS,
                  concurrency: int | None = None, min_calls: int = 0, **gen) -> StepEstimate:
    """The estimate of sending ``prompts`` (str prompts or message lists, as :meth:`map` takes them) to ``llm``
    with the generation params ``gen`` at ``concurrency`` (default the LLM's), from a timed sample answered now and
    kept in the cache for the step (module docstring); no sample when ``min_calls`` or fewer calls are to be
    made. For a step that sends its prompts with :meth:`map`, :func:`map_estimated` times its first calls instead."""
    todo = not_cached(llm, prompts, **gen)
    est = StepEstimate(step, len(prompts), len(prompts) - len(todo))
    if not todo or len(todo) <= min_calls:
        return est
    workers = max(1, int(concurrency or llm.concurrency))
    part = [prompts[i] for i in todo[: max(sample, workers)]]
    before, t0 = llm.usage(), time.perf_counter()
    try:
        llm.map(part, concurrency=workers, progress=False, **gen)
    except LLMError as exc:
        return replace(est, sample_error=f"{type(exc).__name__}: {exc}")
    return extrapolate(step, est.calls, est.cached, len(part), before, llm.usage(), time.perf_counter() - t0)


def map_estimated(llm, prompts: Sequence[str | Sequence[Message]], step: str, policy: EstimatePolicy | None = None,
                  *, sample: int = SAMPLE_CALLS, min_calls: int = 0, concurrency: int | None = None,
                  progress: bool | None = None, desc: str | None = None, **gen) -> list:
    """``llm.map(prompts, ...)`` whose first calls are the timed sample: when more than ``min_calls`` prompts are
    not cached, the prompts up to the ``sample``-th uncached one (at least the concurrency) are answered first, the
    estimate of the rest is given to ``policy`` (default: stderr when over a minute), then the rest are answered.
    Nothing is asked twice, so the LLM's usage counts each prompt once. Returns the completions in input order."""
    todo = not_cached(llm, prompts, **gen)
    cached = len(prompts) - len(todo)
    if len(todo) <= max(min_calls, 0) or not todo:
        return llm.map(prompts, concurrency=concurrency, progress=progress, desc=desc, **gen)
    workers = max(1, int(concurrency or llm.concurrency))
    n = min(len(todo), max(sample, workers))
    cut = todo[n - 1] + 1  # through the n-th uncached prompt
    before, t0 = llm.usage(), time.perf_counter()
    first = llm.map(prompts[:cut], concurrency=workers, progress=False, **gen)
    est = extrapolate(step, len(prompts), cached, n, before, llm.usage(), time.perf_counter() - t0)
    (policy or EstimatePolicy()).show(est)
    rest = llm.map(prompts[cut:], concurrency=concurrency, progress=progress, desc=desc, **gen) if cut < len(
        prompts) else []
    return [*first, *rest]


def worth_showing(est: StepEstimate, dry_run: bool = False) -> bool:
    """Whether to print ``est``: asked for (a dry run), or the step will take more than :data:`SHOW_SECONDS`. A failed
    sample is shown only in a dry run: otherwise the step meets the same failure and reports it its own way."""
    return dry_run or (est.seconds is not None and est.seconds > SHOW_SECONDS)


def to_stderr(line: str) -> None:
    """Print ``line`` on stderr (where progress bars go; stdout stays for results and JSON)."""
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class EstimatePolicy:
    """What a step does with its estimate: ``echo`` (a callable taking one line; None: silent) gets it when
    :func:`worth_showing`; ``dry_run``: the step stops after the estimate, having written nothing."""

    echo: Callable[[str], None] | None = to_stderr
    dry_run: bool = False

    def show(self, est: StepEstimate) -> None:
        """Give ``est`` to ``echo`` when it is worth showing."""
        if self.echo is not None and worth_showing(est, self.dry_run):
            self.echo(est.line())


# ----------------------------------------------------------------------------------- a run that stops at a yield
def estimate_run(n: int, cap: int, sample: int, sample_accepted: int, sample_seconds: float, usage: Mapping,
                 concurrency: int = 1) -> dict:
    """What a whole run whose calls depend on a yield will cost (``lab testset generate``: candidates until ``n``
    pass), from its first batch (the timed sample; its answers are cached, so the
    run reuses them): candidates = n / yield, the yield smoothed as (accepted + 1) / (sample + 2) so a sample
    with no pass does not predict infinity, at most ``cap``; LLM calls and tokens per candidate as in the
    sample (tokens per answer generated, not read from the cache); seconds per candidate the sample's wall time,
    or, when the sample came from the cache, what its answers took when they were generated (``cold_seconds``)
    over ``concurrency``. ``tokens`` None: the sample's answers all came from the cache, which counts no tokens."""
    calls = float(usage.get("calls", 0))
    tokens = float(usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
    rate = (sample_accepted + 1) / (sample + 2)
    candidates = int(min(cap, math.ceil(n / rate))) if sample else cap
    per = max(sample_seconds, float(usage.get("cold_seconds", 0.0)) / max(concurrency, 1)) / max(sample, 1)
    per_call = calls / max(sample, 1)
    return {"candidates": candidates, "calls": int(round(candidates * per_call)),
            "tokens": int(round(tokens / max(float(usage.get("generated", calls)), 1) * candidates * per_call))
            if tokens else None,
            "seconds": round(candidates * per, 1),
            "sample": sample, "sample_accepted": sample_accepted, "sample_seconds": round(sample_seconds, 2),
            "yield_estimate": round(rate, 4), "sample_cached": int(usage.get("cache_hits", 0))}


def format_estimate(est: Mapping) -> str:
    """One line: the estimate of :func:`estimate_run`."""
    tokens = "tokens unknown (sample cached)" if est["tokens"] is None else f"{est['tokens']:,} tokens"
    return (f"estimate: about {est['candidates']} candidates, {est['calls']} LLM calls, {tokens}, "
            f"{est['seconds'] / 60:.1f} min (from a timed sample of {est['sample']} candidates: "
            f"{est['sample_accepted']} passed, {est['sample_seconds']:.1f} s, {est['sample_cached']} answers cached)")
