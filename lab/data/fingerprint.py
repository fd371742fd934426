"""Content fingerprints of datasets and texts: sha256, stable across machines, clones and re-compression.

Conventions
- ``fingerprint(folder)`` hashes the dataset's data files: every regular file under the folder except
  hidden ones (name starting with "."), documentation (``*.md``) and ``ingest_report.json`` (the log `lab
  ingest` writes beside a corpus: its timings and rerun counts change when the corpus does not), in order of
  their relative POSIX path.
- A ``.gz`` file is hashed by its decompressed content under its name without ``.gz``: re-compressing it,
  or storing it uncompressed, does not change the fingerprint. CRLF line ends are hashed as LF (a checkout
  with ``core.autocrlf`` gives the same value); the readers treat them the same.
- Each file contributes ``path \\0 length \\0 bytes``, so no two different file sets share a byte stream.
- A fingerprint is the sha256 hex digest, shortened to its first 16 characters unless ``full=True``.
- :func:`file_fingerprints` gives each data file's own sha256 (16 hex of its canonical content), keyed by the same
  canonical name, so a change can be traced to the corpus, the queries or the qrels.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Protocol

from lab.core.errors import DataError
from lab.data.io import read_bytes
from lab.data.types import Dataset

SHORT = 16
#: Files that describe how a dataset was made rather than what it holds (not hashed).
LOGS = frozenset({"ingest_report.json"})


def dataset_files(folder: Path | str) -> list[Path]:
    """The files :func:`fingerprint` hashes, in canonical order (relative POSIX path, ``.gz`` dropped)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(folder, "dataset folder not found", hint="pass a BEIR dataset folder or a loaded Dataset")
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".md") and p.name not in LOGS
             and not any(part.startswith(".") for part in p.relative_to(folder).parts)]
    names: dict[str, Path] = {}
    for p in files:
        key = _canonical_name(p, folder)
        if key in names:
            raise DataError(p, f"both {names[key].name} and {p.name} exist",
                            hint="keep either the compressed or the plain file, not both")
        names[key] = p
    return [names[k] for k in sorted(names)]


def _canonical_name(path: Path, folder: Path) -> str:
    rel = path.relative_to(folder).as_posix()
    return rel[:-3] if rel.endswith(".gz") else rel


def _content(path: Path) -> bytes:
    return read_bytes(path).replace(b"\r\n", b"\n")


class _Digest(Protocol):
    """What :func:`_finish` needs of a hashlib object."""

    def hexdigest(self) -> str: ...


def _finish(h: _Digest, full: bool) -> str:
    digest = h.hexdigest()
    return digest if full else digest[:SHORT]


def fingerprint(path_or_dataset: Path | str | Dataset, full: bool = False) -> str:
    """Content hash of a dataset folder (or of a loaded Dataset's folder); see the module conventions."""
    folder = Path(path_or_dataset.path if isinstance(path_or_dataset, Dataset) else path_or_dataset)
    h = hashlib.sha256(b"raglab-dataset-v1\0")
    for p in dataset_files(folder):
        data = _content(p)
        h.update(_canonical_name(p, folder).encode("utf-8") + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    return _finish(h, full)


def file_fingerprints(path_or_dataset: Path | str | Dataset) -> dict[str, str]:
    """``{canonical name: first 16 hex of sha256(content)}`` of the files :func:`fingerprint` hashes."""
    folder = Path(path_or_dataset.path if isinstance(path_or_dataset, Dataset) else path_or_dataset)
    return {_canonical_name(p, folder): hashlib.sha256(_content(p)).hexdigest()[:SHORT] for p in dataset_files(folder)}


def fingerprint_texts(texts: Iterable[str], full: bool = False) -> str:
    """Content hash of a sequence of strings (order matters; each is length-prefixed, UTF-8)."""
    h = hashlib.sha256(b"raglab-texts-v1\0")
    for text in texts:
        data = text.encode("utf-8")
        h.update(str(len(data)).encode() + b"\0" + data)
    return _finish(h, full)
