"""The LLM interface and what every backend shares: the :class:`LLM` protocol, :class:`Completion`,
:class:`LLMError`, message and generation-param checks, the cache key, and :class:`BaseLLM` (defaults, cache,
accounting, concurrency limit, ``map``). Conventions: see :mod:`lab.models.llm`."""
from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from lab.core.cache import Cache, content_key
from lab.core.errors import ConfigError, LabError
from lab.core.progress import progress as bar

log = logging.getLogger("lab.llm")

DEFAULT_GEN = {"max_tokens": 256, "temperature": 0.0}
_RESERVED_GEN = {"model", "messages", "stream", "n", "prompt"}
_ROLES = {"system", "user", "assistant"}
CACHE_NAMESPACE = "llm:chat"

Message = Mapping[str, str]


class LLMError(LabError):
    """A generation that failed for good: names the endpoint (or model file), the status and what to do next."""

    def __init__(self, endpoint: str, message: str, status: int | str | None = None, attempts: int = 1,
                 hint: str = ""):
        self.endpoint, self.status, self.attempts, self.hint = endpoint, status, attempts, hint
        status_txt = f"HTTP {status}" if isinstance(status, int) else (status or "error")
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"LLM endpoint {endpoint}: {status_txt}{tries}: {message}" + (f" ({hint})" if hint else ""))


@dataclass(frozen=True)
class Completion:
    """One answer. ``model`` is the LLM's identity; ``seconds`` the wall time of this call (near 0 if cached);
    ``gen_seconds`` what generating the answer took when it was generated (read back from the cache on a hit), so
    a strategy can report the latency a user would see without the cache."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    cached: bool
    model: str
    finish_reason: str | None = None
    gen_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class LLM(Protocol):
    """What a strategy needs from a language model (see the module docstring for conventions)."""

    identity: str

    def chat(self, messages: Sequence[Message], **gen) -> Completion: ...

    def complete(self, prompt: str, system: str | None = None, **gen) -> Completion: ...

    def map(self, items: Sequence[str | Sequence[Message]], concurrency: int | None = None,
            progress: bool = True, desc: str | None = None, **gen) -> list[Completion]: ...

    def usage(self) -> dict[str, float]: ...

    def describe(self) -> dict[str, Any]: ...


#: What a strategy's ``llm`` param accepts (see :func:`load_llm`): a name, a GGUF path or ``openai:MODEL``, a
#: mapping of settings, an LLM object, or None (the packaged local model).
LLMSpec = str | Mapping | LLM | None


def normalize_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Plain ``[{"role", "content"}]`` copies; a ConfigError names the message index and field that is wrong."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ConfigError("messages must be a non-empty list of {'role', 'content'} dicts, not "
                          f"{type(messages).__name__}"
                          "; for a plain prompt call complete(prompt)")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ConfigError(f"messages[{i}]: a dict with 'role' and 'content' expected, not {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            raise ConfigError(f"messages[{i}], field 'role': {role!r} is not one of {sorted(_ROLES)}")
        if not isinstance(content, str):
            raise ConfigError(f"messages[{i}], field 'content': a string expected, not {type(content).__name__}")
        out.append({"role": role, "content": content})
    return out


def prompt_messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat turns that ``complete(prompt, system)`` sends: an optional system turn, then one user turn."""
    if not isinstance(prompt, str):
        raise ConfigError(f"prompt must be a string, not {type(prompt).__name__}")
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


def generation_params(defaults: Mapping[str, Any], gen: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``gen``, checked and typed (max_tokens int >= 1, temperature float >= 0, seed int).
    A value of None drops the field (e.g. ``seed=None`` for a server that refuses seeds)."""
    bad = sorted(set(gen) & _RESERVED_GEN)
    if bad:
        raise ConfigError(f"generation params {bad} are set by the LLM backend; remove them "
                          "(the model is chosen when the LLM is loaded)")
    params = {k: v for k, v in {**defaults, **gen}.items() if v is not None}  # None: leave the field out
    params.setdefault("max_tokens", DEFAULT_GEN["max_tokens"])
    params.setdefault("temperature", DEFAULT_GEN["temperature"])
    try:
        params["max_tokens"] = int(params["max_tokens"])
        params["temperature"] = float(params["temperature"])
        if "seed" in params:
            params["seed"] = int(params["seed"])
        if "top_p" in params:
            params["top_p"] = float(params["top_p"])
        if isinstance(params.get("stop"), str):
            params["stop"] = [params["stop"]]
    except (TypeError, ValueError) as e:
        raise ConfigError(f"generation params {params}: {e}") from None
    if params["max_tokens"] < 1 or params["temperature"] < 0:
        raise ConfigError(f"generation params: max_tokens must be >= 1 and temperature >= 0, got "
                          f"max_tokens={params['max_tokens']}, temperature={params['temperature']}")
    try:
        json.dumps(params)
    except TypeError as e:
        raise ConfigError(f"generation params must be JSON values: {e}") from None
    return params


def request_key(identity: str, messages: Sequence[Message], params: Mapping[str, Any]) -> str:
    """Cache key of one request: ``content_key("llm:chat", identity, canonical JSON of messages and params)``."""
    payload = json.dumps({"messages": list(messages), "params": dict(params)}, sort_keys=True,
                         ensure_ascii=False, separators=(",", ":"))
    return content_key(CACHE_NAMESPACE, identity, payload)


def parse_chat_json(data: Any) -> tuple[str, int, int, str | None]:
    """Fields of an OpenAI chat-completion dict; ValueError naming the missing field."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if "error" in data and "choices" not in data:
        raise ValueError(f"error object instead of choices: {data['error']}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("field 'choices' missing or empty")
    message = choices[0].get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), (str, type(None))):
        raise ValueError("field 'choices[0].message.content' missing")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return (message.get("content") or "", int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0), choices[0].get("finish_reason"))


#: Backoff seconds slept by the call running on this thread (see :meth:`BaseLLM.chat`).
_WAITS = threading.local()


class BaseLLM:
    """Shared machinery: defaults, cache, accounting, concurrency limit, ``map``. Subclasses set ``identity``,
    ``endpoint`` and implement ``_generate(messages, params) -> (text, prompt_tokens, completion_tokens,
    finish_reason)``."""

    identity: str
    endpoint: str
    backend: str

    def __init__(self, *, cache_dir: str | Path | None, concurrency: int, seed: int, defaults: Mapping | None,
                 progress: bool):
        if int(concurrency) < 1:
            raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = int(concurrency)
        self.seed = int(seed)
        self.defaults = generation_params({**DEFAULT_GEN, "seed": self.seed, **(defaults or {})}, {})
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.cache = None if cache_dir is None else Cache(cache_dir)
        self.progress = progress
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._acct_lock = threading.Lock()
        self._acct = dict.fromkeys(("calls", "cache_hits", "generated", "prompt_tokens", "completion_tokens",
                                    "retries", "errors"), 0)
        self._acct["seconds"] = self._acct["load_seconds"] = self._acct["cold_seconds"] = 0.0
        self._acct["retry_wait_seconds"] = 0.0

    # --------------------------------------------------------------------------------------- interface
    def complete(self, prompt: str, system: str | None = None, **gen) -> Completion:
        """``chat`` with one user turn (after an optional system turn)."""
        return self.chat(prompt_messages(prompt, system), **gen)

    def is_cached(self, item: str | Sequence[Message], **gen) -> bool:
        """Whether the answer to ``item`` (a prompt, as :meth:`complete` takes it, or a message list) with these
        generation params is in the cache already (nothing is generated or counted)."""
        if self.cache is None:
            return False
        msgs = normalize_messages(prompt_messages(item) if isinstance(item, str) else item)
        key = request_key(self.identity, msgs, self._key_params(generation_params(self.defaults, gen)))
        return self.cache.get_json(key) is not None

    def chat(self, messages: Sequence[Message], **gen) -> Completion:
        """One answer to ``messages``: from the cache when this (identity, messages, params) was answered before."""
        msgs = normalize_messages(messages)
        params = generation_params(self.defaults, gen)
        t0 = time.perf_counter()
        key = request_key(self.identity, msgs, self._key_params(params)) if self.cache is not None else None
        hit = self.cache.get_json(key) if key is not None else None
        if hit is not None:
            self._count(calls=1, cache_hits=1, cold_seconds=float(hit.get("seconds", 0.0)))
            return Completion(text=hit["text"], prompt_tokens=int(hit["prompt_tokens"]),
                              completion_tokens=int(hit["completion_tokens"]), seconds=time.perf_counter() - t0,
                              cached=True, model=self.identity, finish_reason=hit.get("finish_reason"),
                              gen_seconds=float(hit.get("seconds", 0.0)))
        with self._slots:
            try:
                self._prepare()
                t1 = time.perf_counter()
                _WAITS.seconds = 0.0
                text, p_tok, c_tok, finish = self._generate(msgs, params)
            except BaseException:
                self._count(errors=1)
                raise
            gen_s = max(0.0, time.perf_counter() - t1 - _WAITS.seconds)  # backoff sleeps are not generation
        if key is not None:
            self.cache.put_json(key, {"text": text, "prompt_tokens": p_tok, "completion_tokens": c_tok,
                                      "finish_reason": finish, "seconds": gen_s})
        self._count(calls=1, generated=1, prompt_tokens=p_tok, completion_tokens=c_tok, seconds=gen_s,
                    cold_seconds=gen_s)
        return Completion(text=text, prompt_tokens=p_tok, completion_tokens=c_tok,
                          seconds=time.perf_counter() - t0, cached=False, model=self.identity, finish_reason=finish,
                          gen_seconds=gen_s)

    def map(self, items: Sequence[str | Sequence[Message]], concurrency: int | None = None,
            progress: bool | None = None, desc: str | None = None, **gen) -> list[Completion]:
        """Answers to many prompts (str) or message lists, in input order, run on up to ``concurrency`` threads
        (default: this LLM's limit; the LLM's own semaphore bounds requests either way). The first error cancels
        what has not started and is raised."""
        conversations = [prompt_messages(it) if isinstance(it, str) else normalize_messages(it) for it in items]
        if not conversations:
            return []
        generation_params(self.defaults, gen)  # a bad param fails here, before any work starts
        workers = max(1, min(int(concurrency or self.concurrency), len(conversations)))
        out: list[Completion | None] = [None] * len(conversations)
        show = (self.progress if progress is None else progress) and len(conversations) > 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm") as pool:
            futures = {pool.submit(self.chat, msgs, **gen): i for i, msgs in enumerate(conversations)}
            pending = set(futures)
            with _Bar(bar, len(conversations), desc or f"LLM {self.backend} calls", show) as tick:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        if f.exception() is not None:
                            for p in pending:
                                p.cancel()
                            raise f.exception()
                        out[futures[f]] = f.result()
                    tick(len(done))
        return out  # type: ignore[return-value]

    batch = map

    def usage(self) -> dict[str, float]:
        """Counters of this object (see the module docstring); plain numbers, ready for ``log_metrics``."""
        with self._acct_lock:
            return dict(self._acct)

    # --------------------------------------------------------------------------------------- internals
    def _waited(self, seconds: float) -> None:
        """Record a backoff sleep of the call running on this thread (left out of its generation time)."""
        _WAITS.seconds = getattr(_WAITS, "seconds", 0.0) + seconds

    def _count(self, **amounts) -> None:
        with self._acct_lock:
            for k, v in amounts.items():
                self._acct[k] += v

    def _prepare(self) -> None:
        """Run before the timed part of a generation (a local model loads here, counted as ``load_seconds``)."""

    def _key_params(self, params: dict) -> dict:
        """The params that go into the cache key (a backend adds what changes its answers beyond them)."""
        return params

    def _generate(self, messages: list[dict], params: dict) -> tuple[str, int, int, str | None]:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.identity!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


class _Bar:
    """A progress bar over ``total`` steps that can be advanced by n (lab.core.progress's tqdm, or nothing)."""

    def __init__(self, factory, total: int, desc: str, enabled: bool):
        self._bar = factory(range(total), desc=desc, total=total, enabled=enabled)
        self._tqdm = hasattr(self._bar, "update")

    def __enter__(self):
        return (lambda n: self._bar.update(n)) if self._tqdm else (lambda n: None)

    def __exit__(self, *exc):
        if self._tqdm:
            self._bar.close()
