"""LLM backends behind one small interface: any OpenAI-compatible endpoint, or a local GGUF model in-process.

The interface (:class:`LLM`)
    ``chat(messages, **gen) -> Completion``       messages: ``[{"role": "system"|"user"|"assistant", "content": str}]``
    ``complete(prompt, system=None, **gen)``      one user turn (plus an optional system turn) sent to ``chat``:
                                                  instruct models and most hosted APIs only serve chat, so there is
                                                  no raw-text path, and a prompt means the same on every backend.
    ``map(items, concurrency=None, **gen)``       many prompts / message lists at once (threads, bounded, progress
                                                  bar, results in input order).
    ``identity``                                  names the LLM in cache keys, params and results:
                                                  ``gguf:<file name>@sha256:<first 16 hex of the file's sha256>``
                                                  ``openai:<base_url>#<model>`` (base URL without user info/query)
    ``usage()``                                   numbers for MLflow (see the accounting below).
    ``describe()``                                the settings as a plain dict (params).

Generation params (``**gen``): ``max_tokens`` (default 256), ``temperature`` (default 0.0), ``seed`` (default
the object's seed, 0), and any other OpenAI chat-completions field (``top_p``, ``stop``, ``top_k`` for llama.cpp
and vLLM ...). ``model``, ``messages``, ``stream`` and ``n`` are set by the backend and refused here. Defaults
are filled in before the cache key is made, so ``complete(p)`` and ``complete(p, temperature=0)`` share a key.

Cache: every answer is stored in the content-addressed store of :mod:`lab.core.cache` under
``content_key("llm:chat", identity, canonical JSON of {"messages", "params"})``, so a rerun (another process,
another day) is answered without a request; concurrent writers are safe (``INSERT OR IGNORE`` of equal values).
With ``temperature > 0`` the cached answer is the one sample drawn for that seed. ``cache_dir=None`` disables it.

Accounting per LLM object, thread-safe: ``calls`` (answers returned), ``cache_hits``, ``generated`` (answers that
cost a request or a local generation), ``prompt_tokens`` / ``completion_tokens`` (of generated answers only:
what was paid), ``seconds`` (wall time of generated answers, summed over calls, so concurrent calls add up),
``cold_seconds`` (what every returned answer took when it was generated, cache hits included: the cost of a
cold run, so a cached rerun still reports it), ``load_seconds`` (loading a local model), ``retries`` (attempts made
again after a 429, 5xx, timeout, dropped connection or malformed answer), ``errors`` (calls that failed for good)
and ``retry_wait_seconds`` (backoff sleeps before retries, summed). ``seconds``, ``cold_seconds`` and
``Completion.gen_seconds`` exclude those sleeps (the failed attempts' own request time stays in), so latencies built
from them are generation time, and waits are reported apart. ``Completion.seconds`` is the wall time of that one
call, sleeps included (near 0 when cached).

Secrets: an API key is read from a parameter or an environment variable and kept in a private attribute; it never
enters ``identity``, ``describe()``, ``usage()``, ``repr``, log lines or error messages (server bodies quoted in
errors have it masked). A dict spec with an ``api_key`` is refused: name the variable with ``api_key_env``.

Retries (HTTP): on 429, 5xx, timeouts and dropped connections, up to ``max_retries`` more attempts, waiting
``Retry-After`` / ``retry-after-ms`` when the server sends one (refusing waits above ``max_retry_after_s``), else
exponential backoff ``min(cap, base * 2**n)`` times a jitter factor in [0.5, 1.5) from a ``random.Random(retry_seed)``.
A 200 whose body is not an OpenAI chat completion is retried once, then fails. Other 4xx fail at once. Every
failure is an :class:`LLMError` naming the endpoint, the status and what to do next.

The package: :mod:`lab.models.llm.base` (the protocol, :class:`Completion`, the shared machinery),
:mod:`lab.models.llm.http` (:class:`OpenAILLM`), :mod:`lab.models.llm.local` (:class:`LocalLLM` and the packaged
default), :mod:`lab.models.llm.cores` (llama.cpp threads from the idle cores) and :mod:`lab.models.llm.factory`
(:func:`load_llm`).
"""
from lab.models.llm.base import LLM, Completion, LLMError, LLMSpec, Message
from lab.models.llm.cores import THREADS_ENV, usable_cores
from lab.models.llm.factory import load_llm
from lab.models.llm.http import OpenAILLM
from lab.models.llm.local import LocalLLM, default_llm_hint, is_default_llm

__all__ = ["LLM", "THREADS_ENV", "Completion", "LLMError", "LLMSpec", "LocalLLM", "Message", "OpenAILLM",
           "default_llm_hint", "is_default_llm", "load_llm", "usable_cores"]
