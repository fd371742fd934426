"""Atomic files: a reader (or a rerun) sees the old file or the whole new one, never a 0-byte or half file.

The one writer of the package: every write-then-rename goes through :func:`atomic_path` (or its helpers below).
The new content goes to a temporary file with a unique name in the target's folder (same file system), is
flushed to disk (fsync) and renamed onto the target (``os.replace``, atomic on POSIX). When writing fails (a full
disk, an error while serialising) the temporary file is removed, the target is left as it was, and the error
propagates (an OSError that names no file is raised again naming the target).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


@contextmanager
def atomic_path(path: str | Path, mode: int = 0o644, prefix: str | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; on a normal exit it is fsynced and renamed onto ``path``
    (parent folders are created), on an error it is removed. ``mode``: the file's permissions (0644, as a plain
    new file); ``prefix``: the temporary's name start (default ``.NAME.``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}." if prefix is None else prefix, suffix=".tmp",
                                dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None:  # a failed write names no file: name the one being written
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def open_atomic(path: str | Path, binary: bool = False, encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """An open file (text: ``encoding``, ``\\n`` line ends; or ``binary``) whose content replaces ``path``
    atomically when the block ends without an error (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        if binary:
            with open(tmp, "wb") as fh:
                yield fh
        else:
            with open(tmp, "w", encoding=encoding, newline="\n") as fh:
                yield fh


def write_text_atomic(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see the module docstring); returns ``path``."""
    with open_atomic(path, encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes, prefix: str | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring); returns ``path``."""
    with atomic_path(path, prefix=prefix) as tmp:
        tmp.write_bytes(data)
    return Path(path)


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``path`` to fill; on a normal exit it is renamed onto ``path`` in one step, so a
    reader sees no folder or the whole one. When ``path`` appeared meanwhile (another process made the same folder,
    e.g. the same cached model), that one is kept and this one discarded. On an error the temporary folder is
    removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
