"""One LLM from a spec (:func:`load_llm`): a name, a GGUF path, ``openai:MODEL``, a mapping of settings, or an LLM
object. A mapping's fields are the backend constructor's own keywords (:data:`OPENAI_OPTIONS`,
:data:`LOCAL_OPTIONS`), so an option added to a constructor is accepted here without a second list."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Iterable, Mapping

from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.models.llm.base import LLM
from lab.models.llm.http import OpenAILLM
from lab.models.llm.local import LOCAL_ALIASES, LocalLLM
from lab.models.packaged_gguf import PACKAGED_GGUFS, find_packaged, packaged_gguf_path

#: Constructor keywords a spec may not set: where answers are cached and whether bars show are the caller's
#: (``load_llm``'s ``cache_dir`` and ``kwargs``), and a key is never written in params (``api_key_env`` names it).
CALLER_ONLY = ("self", "cache_dir", "progress", "api_key")


def constructor_options(cls: type) -> frozenset[str]:
    """The fields a dict spec may hold for backend ``cls``: ``backend`` and the keywords of its constructor, less
    :data:`CALLER_ONLY`."""
    return frozenset({"backend"} | set(inspect.signature(cls.__init__).parameters) - set(CALLER_ONLY))


OPENAI_OPTIONS = constructor_options(OpenAILLM)
LOCAL_OPTIONS = constructor_options(LocalLLM)


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
            _check_keys(spec, OPENAI_OPTIONS, backend)
            spec.pop("backend")
            return OpenAILLM(cache_dir=cache_dir, **spec, **kwargs)
        if backend in ("gguf", "local", "smollm2"):
            _check_keys(spec, LOCAL_OPTIONS, backend)
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
