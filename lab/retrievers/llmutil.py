"""What LLM-powered strategies share: building their LLM from params, and naming it in ``describe()``.

``llm`` param of every LLM strategy: a spec for :func:`lab.models.llm.load_llm` (``"local"`` / ``None``: the
packaged SmolLM2-135M-Instruct, offline; a ``.gguf`` path; ``"openai:MODEL"``; or a dict). The LLM shares the
strategy's cache folder (``ctx.cache_dir``), so index-time work (questions, summaries, rewrites) repeated by a
rerun or another sweep point is read back, not generated again. Temperature 0 unless the params say otherwise.

Index builds that call the LLM once per unit (contextual, qna, raptor) send their prompts through
:func:`lab.models.estimate.map_estimated`: when more than :data:`INDEX_ESTIMATE_CALLS` answers are not cached, the
first few are timed and the estimate of the whole build (calls, tokens, time) is printed on stderr when it will take
more than a minute.
"""
from __future__ import annotations

from typing import Any, Mapping

from lab.models.llm import load_llm
from lab.retrievers.base import Context

#: An index build with more LLM calls than this to make (answers not cached) times its first calls and prints its
#: estimate when it will take more than a minute (lab.models.estimate.SHOW_SECONDS).
INDEX_ESTIMATE_CALLS = 20


def llm_for(ctx: Context, spec: str | Mapping | None = None, **kwargs):
    """The LLM named by ``spec`` with the strategy's cache folder, progress setting and seed."""
    kwargs.setdefault("progress", ctx.progress)
    kwargs.setdefault("seed", ctx.seed)
    return load_llm(spec, cache_dir=ctx.cache_dir, **kwargs)


def llm_describe(llm) -> dict[str, Any]:
    """Plain fields naming the LLM for params and tags: ``llm`` (identity) and ``llm_backend``."""
    return {"llm": llm.identity, "llm_backend": getattr(llm, "backend", "?")}
