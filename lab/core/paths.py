"""Where things live: the repository root and paths relative to it.

Convention: a relative path in a notebook parameter or a params YAML is relative to the repository root
(the folder holding ``pyproject.toml`` and the ``lab`` package), never to the current directory, so a notebook
runs the same from JupyterLab (cwd = notebooks/), from Papermill (cwd = wherever) and from the CLI.
Absolute paths are kept as they are. ``LAB_REPO_ROOT`` in the environment overrides the search.
"""
from __future__ import annotations

import os
import site
import sys
from pathlib import Path
from typing import Any, Iterable

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


#: how :func:`public_path` writes a path inside a site-packages folder (an installed package's files)
SITE_PREFIX = "site-packages/"
#: how :func:`public_path` writes a path inside the ``LAB_CACHE_DIR`` folder when that lies outside repo and home
CACHE_PREFIX = "$LAB_CACHE_DIR/"


def site_dirs() -> list[Path]:
    """The folders installed packages live in: :func:`site.getsitepackages`, the user site folder and the
    ``sys.path`` entries named ``site-packages`` or ``dist-packages``, each once, in that order."""
    packages = site.getsitepackages()
    out: list[Path] = []
    for entry in [*packages, site.getusersitepackages(), *sys.path]:
        if not entry:
            continue
        p = Path(entry)
        if p.name not in ("site-packages", "dist-packages") and str(entry) not in packages:
            continue
        p = p.resolve()
        if p not in out:
            out.append(p)
    return out


def _inside(p: Path, folder: Path) -> str | None:
    """``p`` relative to ``folder`` (posix), or None when it is not inside it."""
    try:
        return p.relative_to(folder).as_posix()
    except ValueError:
        return None


def _named(p: Path, named: Iterable[Any]) -> str | None:
    """The string among ``named`` (a config's values) that names the same file or folder as ``p``, if any."""
    for value in named:
        if not isinstance(value, (str, Path)) or not str(value):
            continue
        given = Path(value).expanduser()
        candidates = [given] if given.is_absolute() else [Path.cwd() / given]
        if not given.is_absolute():
            try:
                candidates.append(repo_root() / given)
            except ConfigError:
                pass
        if any(c.resolve() == p for c in candidates):
            return str(value)
    return None


def public_path(path: str | Path, named: Iterable[Any] = ()) -> str:
    """``path`` as provenance files and logged params show it, never with a machine's absolute prefix; the one
    rule every such write uses (:func:`resolve_public_path` reads it back).

    A relative path is kept (posix). An absolute one, in this order:

    1. inside a site-packages folder (:func:`site_dirs`; an installed package's files such as the packaged
       MiniLM): ``site-packages/<path inside it>``;
    2. inside the repository: relative to its root;
    3. inside ``$HOME``: ``~/<path inside it>``;
    4. a path the user named (a value of ``named``, e.g. the config's values, naming the same file or folder):
       exactly as they wrote it, since it is their input;
    5. inside the ``LAB_CACHE_DIR`` folder (set outside repo and home): ``$LAB_CACHE_DIR/<path inside it>``;
    6. anything else: its last component only.

    Forms 1, 2, 3 and 5, and an absolute or relative path the user gave, resolve back to a path on this machine
    (:func:`resolve_public_path`); form 6 does not (it names the file only)."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        return p.as_posix()
    p = p.resolve()
    for folder in site_dirs():
        rel = _inside(p, folder)
        if rel is not None:
            return SITE_PREFIX + rel
    try:
        rel = _inside(p, repo_root())
    except ConfigError:
        rel = None
    if rel is not None:
        return rel
    rel = _inside(p, Path.home().resolve())
    if rel is not None:
        return "~/" + rel if rel != "." else "~"
    given = _named(p, named)
    if given is not None:
        return given
    cache = os.environ.get("LAB_CACHE_DIR")
    if cache:
        rel = _inside(p, Path(cache).expanduser().resolve())
        if rel is not None:
            return CACHE_PREFIX + rel
    return p.name


def resolve_public_path(text: str | Path) -> Path:
    """The path on this machine that a :func:`public_path` form names: ``site-packages/<rel>`` in the first
    site folder (:func:`site_dirs`) that holds it (the first site folder when none does), ``$LAB_CACHE_DIR/<rel>``
    under that folder (default ``.cache`` at the repo root), ``~`` expanded, an absolute path as it is (runs
    recorded before public forms existed), anything else relative to the repository root (as it is when there is
    no repository)."""
    s = str(text)
    if s.startswith(SITE_PREFIX):
        rel = s[len(SITE_PREFIX):]
        dirs = site_dirs()
        for folder in dirs:
            if (folder / rel).exists():
                return folder / rel
        return dirs[0] / rel if dirs else Path(rel)
    if s.startswith(CACHE_PREFIX):
        cache = os.environ.get("LAB_CACHE_DIR", ".cache")
        try:
            return resolve_repo_path(cache) / s[len(CACHE_PREFIX):]
        except ConfigError:
            return Path(cache).expanduser() / s[len(CACHE_PREFIX):]
    p = Path(s).expanduser()
    if p.is_absolute():
        return p
    try:
        return repo_root() / p
    except ConfigError:
        return p


def public_paths_in(value: Any, named: Iterable[Any] = ()) -> Any:
    """A copy of ``value`` (nested dicts, lists, tuples) whose string and Path leaves that are absolute paths
    (``~`` counts) are written by :func:`public_path` (``named``: the strings the user gave, e.g. the config's
    values); other leaves are kept as they are. What a strategy description or an info dict becomes before it is
    logged or written to a provenance file."""
    named = list(named)
    if isinstance(value, dict):
        return {k: public_paths_in(v, named) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(public_paths_in(v, named) for v in value)
    if isinstance(value, Path) or (isinstance(value, str) and value[:1] in ("/", "~") and "\n" not in value):
        return public_path(value, named) if Path(value).expanduser().is_absolute() else value
    return value
