"""Weights identities computed from the files on disk, without loading a model.

Conventions
- :func:`file_sha256` is the hex sha256 of a file's bytes; :func:`fingerprint_folder` the hex sha256 over a model
  folder's files that shape its outputs (relative path and content sha256 of each, in path order; READMEs,
  desktop.ini, onnx/openvino exports, dot files and lock files left out). :func:`weights_sha256` is one or the
  other, for a path that is a file (a GGUF, a weights file) or a folder (a sentence-transformers model).
- ``memo``: a :class:`lab.core.cache.Cache`; a file's hash is remembered by (absolute path, size, mtime), so a large
  model is read once per install and checking it again costs a ``stat``.
- :func:`models_in` finds the models a strategy description (``describe()``) names: every mapping, at any depth
  (lists included), with a string ``model_identity``, ``identity`` or ``weights_sha256``; its name is ``model``
  (else the identity) and its weights path ``model_path`` or ``path`` (None for a remote model, e.g. an
  OpenAI-compatible endpoint: only its name identifies it).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from lab.core.cache import Cache
from lab.core.errors import ConfigError
from lab.core.paths import public_path, resolve_repo_path

# files that do not change the vectors and are left out of a model folder's fingerprint
SKIP_NAMES = {"README.md", ".gitattributes", "desktop.ini", "data_config.json"}
SKIP_DIRS = {"onnx", "openvino", ".git", "__pycache__", ".cache"}


def _memo_key(path: Path, memo) -> str:
    """The memo key of a file's hash: its absolute path, size and mtime."""
    st = path.stat()
    return memo.key("filehash", "sha256", f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}")


def remember_sha256(path: str | Path, digest: str, memo) -> None:
    """Store ``digest`` as the hash of ``path`` as it is now (for a file whose bytes were hashed while written)."""
    memo.put_json(_memo_key(Path(path), memo), digest)


def file_sha256(path: str | Path, memo=None) -> str:
    """Hex sha256 of a file (remembered in ``memo`` by path, size and mtime)."""
    path = Path(path)
    key = None
    if memo is not None:
        key = _memo_key(path, memo)
        hit = memo.get_json(key)
        if hit:
            return hit
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    digest = h.hexdigest()
    if memo is not None:
        memo.put_json(key, digest)
    return digest


def fingerprint_folder(folder: str | Path, memo=None) -> str:
    """sha256 (hex) over the files of a model folder that shape its outputs: (relative path, content sha256)."""
    folder = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        if rel.name in SKIP_NAMES or set(rel.parts[:-1]) & SKIP_DIRS:
            continue
        if rel.name.startswith(".") or rel.name.endswith(".lock"):
            continue
        h.update(str(rel.as_posix()).encode() + b"\0" + file_sha256(path, memo).encode() + b"\n")
    return h.hexdigest()


def weights_sha256(path: str | Path, memo=None) -> str | None:
    """:func:`fingerprint_folder` of a folder, :func:`file_sha256` of a file, None when nothing is there."""
    p = Path(path)
    if p.is_dir():
        return fingerprint_folder(p, memo)
    if p.is_file():
        return file_sha256(p, memo)
    return None


def models_in(describe: Any) -> list[dict]:
    """``[{"name", "identity", "path"}]`` of the models named anywhere in a strategy description, each once (by
    identity and path), in the order found (see the module docstring)."""
    found: dict[tuple, dict] = {}

    def walk(node):
        if isinstance(node, Mapping):
            ident = next((node[k] for k in ("model_identity", "identity", "weights_sha256")
                          if isinstance(node.get(k), str) and node.get(k)), None)
            if ident is not None:
                path = node.get("model_path") or node.get("path")
                path = str(path) if isinstance(path, (str, Path)) and str(path) else None
                name = node.get("model") if isinstance(node.get("model"), str) and node.get("model") else ident
                found.setdefault((ident, path), {"name": name, "identity": ident, "path": path})
            for value in node.values():
                walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value)

    walk(describe)
    return list(found.values())


def weights_path(embedder: Any) -> str | None:
    """The weights an embedder was loaded from (``path``; None when it has none): for a graph exported from them
    (:class:`lab.models.backends.ExportedEmbedder`, whose ``path`` is the export in the cache) the weights of its
    ``base``. What a description records as ``model_path``: changed weights export anew under another key and the
    old export stays as it was, so only the source weights tell that they changed."""
    path = getattr(getattr(embedder, "base", embedder), "path", None)
    return str(path) if path is not None else None


def weights_record(describe: Any, memo=None, named: Iterable[Any] = ()) -> list[dict]:
    """:func:`models_in` with ``sha256`` = :func:`weights_sha256` of each path (None without a path): what a run
    records so that a later sweep can tell whether the weights changed (``sort_keys`` JSON in a tag).

    Each ``path`` is recorded in :func:`lab.core.paths.public_path` form (``named``: the config's values, the
    paths the user gave), so no machine's absolute path is recorded; :func:`lab.core.paths.resolve_public_path`
    finds the weights again to hash them (an absolute path recorded by an older run is read as it is)."""
    named = list(named)
    out = []
    for m in models_in(describe):
        digest = weights_sha256(m["path"], memo) if m["path"] else None
        out.append({**m, "path": public_path(m["path"], named) if m["path"] else None, "sha256": digest})
    return out


def default_memo():
    """The :class:`lab.core.cache.Cache` at ``LAB_CACHE_DIR`` (default ``.cache`` at the repo root) as a hash memo; None
    when it cannot be opened (hashes are then computed each time)."""
    raw = os.environ.get("LAB_CACHE_DIR", ".cache")
    try:
        folder = resolve_repo_path(raw)
    except ConfigError:
        folder = Path(raw)
    try:
        return Cache(folder)
    except OSError:
        return None
