"""The HTTP backend: :class:`OpenAILLM`, any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama,
llama.cpp server) over httpx, with retries, backoff and a key that never leaves it. Conventions: see
:mod:`lab.models.llm`."""
from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from lab.core.errors import ConfigError
from lab.core.net import backoff_delay, parse_retry_after
from lab.models.llm.base import BaseLLM, LLMError, parse_chat_json

log = logging.getLogger("lab.llm")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENVS = ("LAB_LLM_API_KEY", "OPENAI_API_KEY")


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


class OpenAILLM(BaseLLM):
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
        self._url_from = "base_url" if base_url else next(
            (e for e in ("LAB_LLM_BASE_URL", "OPENAI_BASE_URL") if os.environ.get(e)), "the default base URL")
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
                                 f"is the server running? check {self._url_from} ({self.base_url})") from None
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
            self._waited(wait_s)
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
