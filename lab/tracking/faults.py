"""What went wrong with a store, in plain words, and where a result that could not be logged goes instead.

- :func:`plain_cause`: "the disk holding the store is full", "the store is read-only", "the tracking server
  http://host:5000 does not answer" for the faults a team meets; any other error as ``Type: first line``.
- :func:`unlogged_root`: the folder for results that could not be logged: ``$LAB_UNLOGGED_DIR`` when set (a sweep
  sets it to ``<--output-dir>/unlogged`` for itself and its notebooks), else ``unlogged/`` in the tracking root's
  folder (the folder of a ``sqlite:///`` file), else, for a server, ``~/.cache/raglab/unlogged``. Never the
  checkout, unless the store is there.
"""
from __future__ import annotations

import errno
import os
import urllib.request
from pathlib import Path

from lab.core.errors import TrackingError
from lab.tracking.store import exception_chain, is_uri, root_path, sqlite_file

#: Environment variable naming the folder for unlogged results (see the module docstring).
UNLOGGED_ENV = "LAB_UNLOGGED_DIR"

_CONNECTION_WORDS = ("connection refused", "max retries exceeded", "failed to establish a new connection",
                     "connection aborted", "remotedisconnected", "read timed out", "connect timeout",
                     "name or service not known", "connection reset")


def plain_cause(exc: BaseException, tracking_root: str | Path | None = None) -> str:
    """The cause of ``exc`` (anywhere in its chain) in plain words (see the module docstring)."""
    chain = exception_chain(exc)
    for e in chain:
        low = str(e).lower()
        if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "disk is full" in low \
                or "no space left" in low:
            return "the disk holding the store is full"
        if (isinstance(e, OSError) and e.errno == errno.EROFS) or "readonly database" in low \
                or "read-only file system" in low:
            return "the store is read-only"
        if any(w in low for w in _CONNECTION_WORDS) or type(e).__name__ in ("ConnectionError", "ConnectTimeout",
                                                                            "ReadTimeout", "MaxRetryError"):
            return f"the tracking server {tracking_root or ''} does not answer".replace("  ", " ")
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def unlogged_root(tracking_root: str | Path = "mlruns") -> Path:
    """The folder unlogged results go under (see the module docstring); not created here."""
    if os.environ.get(UNLOGGED_ENV):
        return Path(os.environ[UNLOGGED_ENV]).expanduser()
    if not is_uri(tracking_root):
        return root_path(tracking_root) / "unlogged"
    db = sqlite_file(str(tracking_root))
    if db is not None:
        return db.parent / "unlogged"
    return Path.home() / ".cache" / "raglab" / "unlogged"


def server_answers(tracking_root: str | Path, timeout: float = 10.0) -> bool:
    """Whether the tracking server at ``root`` (an http(s) URI) answers its ``/health`` check; True for any other
    store."""
    url = str(tracking_root)
    if not url.startswith(("http://", "https://")):
        return True
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as r:  # noqa: S310 - http(s) only
            return r.status == 200
    except OSError:
        return False


def check_server(tracking_root: str | Path, doing: str) -> None:
    """Raise the one TrackingError line of a sweep whose tracking server stopped answering (the server, what the
    sweep was doing, what to do); nothing when it answers or ``tracking_root`` is no server."""
    if not server_answers(tracking_root):
        raise TrackingError(f"the tracking server {tracking_root} does not answer (while {doing}); the sweep stopped. "
                            "Start the server again (lab server) and rerun the same command: finished configs are "
                            "kept, the others run again")
