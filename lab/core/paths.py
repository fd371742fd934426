"""Where things live: the repository root and paths relative to it.

Convention: a relative path in a notebook parameter or a params YAML is relative to the repository root
(the folder holding ``pyproject.toml`` and the ``lab`` package), never to the current directory, so a notebook
runs the same from JupyterLab (cwd = notebooks/), from Papermill (cwd = wherever) and from the CLI.
Absolute paths are kept as they are. ``LAB_REPO_ROOT`` in the environment overrides the search.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lab.core.errors import ConfigError


def _is_root(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() and (folder / "lab").is_dir()


def repo_root(start: str | Path | None = None) -> Path:
    """The repository root: ``LAB_REPO_ROOT`` if set, else the first folder holding ``pyproject.toml`` and ``lab/``
    walking up from ``start`` (default: the current directory, then this package's own location)."""
    env = os.environ.get("LAB_REPO_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not _is_root(root):
            raise ConfigError(f"LAB_REPO_ROOT={env}: no pyproject.toml and lab/ there; "
                              "unset it or point it at the repo")
        return root
    starts = [Path(start)] if start is not None else [Path.cwd(), Path(__file__).parent]
    for s in starts:
        s = s.expanduser().resolve()
        for folder in (s, *s.parents):
            if _is_root(folder):
                return folder
    raise ConfigError(f"no repository root (pyproject.toml next to lab/) above {', '.join(map(str, starts))}; "
                      "run from inside the raglab checkout or set LAB_REPO_ROOT")


def resolve_repo_path(path: str | Path, root: str | Path | None = None) -> Path:
    """``path`` made absolute: kept if absolute (``~`` expanded), else joined to ``root`` (default: repo_root())."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    return (Path(root) if root is not None else repo_root()) / p


def existing_or_repo_path(path: Any) -> Any:
    """``path`` as given when it exists from the working directory (or is absolute, or not a path at all), else the
    same relative path under the repo root: notebooks and sweeps run in notebooks/ and name ``data/...``. Outside
    the repo the path is returned as given, so the reader names the missing folder."""
    if not isinstance(path, (str, Path)):
        return path
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    try:
        return resolve_repo_path(p)
    except ConfigError:
        return p


def results_dir(*parts: str, root: str | Path | None = None, create: bool = True) -> Path:
    """``<repo>/results/<parts...>`` (ignored by git), created unless ``create=False``."""
    out = resolve_repo_path(Path("results", *parts), root)
    if create:
        out.mkdir(parents=True, exist_ok=True)
    return out


def public_path(path: str | Path) -> str:
    """``path`` as provenance and logged params may show it: relative to the repository root when inside it,
    else its last component only, so no machine's absolute paths are recorded."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        return p.as_posix()
    try:
        return p.resolve().relative_to(repo_root()).as_posix()
    except (ValueError, ConfigError):
        return p.name
