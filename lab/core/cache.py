"""One content-addressed on-disk store for everything expensive: embeddings, indexes, LLM outputs.

Keys
    ``Cache.key(namespace, identity, payload)`` is the hex sha256 of the three parts, each written as an
    8-byte big-endian length followed by its bytes (str parts as UTF-8), so no two different triples share
    a key. ``namespace`` names the kind of value ("embed:passage", "index:faiss", "llm:chat"),
    ``identity`` the thing that produced it (a model identity with every setting that changes the output),
    ``payload`` the input (a text, or a canonical JSON of a request).

Layout under ``root``
    ``store.sqlite``  SQLite in WAL mode, two tables:
        ``vectors(key, dim, data)``  one float32 row per text (``data`` = ``dim`` little-endian float32);
        ``blobs(key, data)``         bytes values up to ``INLINE_MAX`` bytes (JSON is stored as UTF-8 bytes).
    ``blobs/ab/<key>``  bytes values larger than ``INLINE_MAX`` (faiss indexes), written to a temp file in
        the same folder and moved into place with ``os.replace``, so a reader sees the old file or the whole
        new one, never a part.

Why SQLite and not one .npy per text: measured here (2 shared cores, 384-d float32 rows, 20,000 texts), one
table written in transactions of 512 rows and read in chunks of 500 keys did 14,000 writes/s and 41,000
reads/s; one .npy file per text (temp file + os.replace) did 2,900 writes/s and 3,300 reads/s, i.e. 5x and
12x slower, plus 10^5 inodes to list and delete. At 10^5 texts SQLite still wrote 8,400/s and read 31,500/s
(210 MB). A plain rowid table is used: WITHOUT ROWID was 2-5x slower for rows of this size (1.5 KB).
WAL lets readers run while one writer commits; concurrent writers queue on SQLite's lock (``busy_timeout``),
each batch is one transaction, and ``INSERT OR IGNORE`` makes a value written twice (two processes encoding the same
text) harmless because content-addressed values are equal. WAL needs a local file system (not NFS).

Conventions: values are immutable (a key is never overwritten with different content); a process that
forks reopens its own connection (the connection is tied to the pid that opened it).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, Hashable, Sequence

import numpy as np

from lab.core.atomic import write_bytes_atomic
from lab.core.progress import progress_items

#: bytes values larger than this go to a file under ``blobs/`` instead of the SQLite table.
INLINE_MAX = 1 << 20
#: keys per ``IN (...)`` lookup; SQLite's default limit on bound parameters is 32766 (>= 3.32).
_LOOKUP_CHUNK = 500
_BUSY_TIMEOUT_S = 120.0

_MEMOS: "weakref.WeakSet[Memo]" = weakref.WeakSet()  # every Memo of the process, for clear_memos()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, dim INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (key BLOB PRIMARY KEY, data BLOB NOT NULL);
"""


def content_key(namespace: str, identity: str, payload: str | bytes) -> str:
    """Hex sha256 of (namespace, identity, payload), each part length-prefixed (8 bytes, big-endian)."""
    h = hashlib.sha256()
    for part in (namespace, identity, payload):
        b = part.encode("utf-8") if isinstance(part, str) else bytes(part)
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()


class Cache:
    """The content-addressed store rooted at ``root`` (created on first use). See the module docstring."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()  # not self._lock: callers may hold that one while calling _db()

    key = staticmethod(content_key)

    # ------------------------------------------------------------------ connection
    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            with self._open_lock:  # threads of one process share one connection: open it once
                if self._conn is None or self._pid != os.getpid():
                    self._conn, self._pid = self._open(), os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        """A connection in WAL mode with the schema in place. Switching a new database to WAL takes an exclusive
        lock for which SQLite does not always call the busy handler, so two processes opening a new store at once
        can get "database is locked" at once: that step is retried with backoff, up to the busy timeout."""
        self.root.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.root / "store.sqlite", timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}")
        deadline, wait = time.monotonic() + _BUSY_TIMEOUT_S, 0.01
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
                return conn
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(wait)
                wait = min(wait * 2, 0.5)

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn, self._pid = None, None

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:  # picklable: a child process opens its own connection
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["root"])

    # ------------------------------------------------------------------ bytes / json / arrays
    def _blob_path(self, key: str) -> Path:
        return self.root / "blobs" / key[:2] / key

    def get_bytes(self, key: str) -> bytes | None:
        """The bytes stored under ``key``, or None."""
        with self._lock:
            row = self._db().execute("SELECT data FROM blobs WHERE key=?", (bytes.fromhex(key),)).fetchone()
        if row is not None:
            return bytes(row[0])
        path = self._blob_path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (atomic; a concurrent writer of the same key is harmless)."""
        data = bytes(data)
        if len(data) <= INLINE_MAX:
            with self._lock:
                self._db().execute("INSERT OR IGNORE INTO blobs(key, data) VALUES (?, ?)", (bytes.fromhex(key), data))
            return
        write_bytes_atomic(self._blob_path(key), data, prefix=f".{key[:8]}.")

    def has(self, key: str) -> bool:
        """True when a bytes/JSON/array value is stored under ``key``."""
        with self._lock:
            row = self._db().execute("SELECT 1 FROM blobs WHERE key=?", (bytes.fromhex(key),)).fetchone()
        return row is not None or self._blob_path(key).exists()

    def get_json(self, key: str) -> Any:
        """The JSON value stored under ``key``, or None."""
        data = self.get_bytes(key)
        return None if data is None else json.loads(data.decode("utf-8"))

    def put_json(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value (canonical: sorted keys, UTF-8)."""
        self.put_bytes(key, json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8"))

    def get_array(self, key: str) -> np.ndarray | None:
        """The array stored under ``key`` (``.npy`` format, no pickles), or None."""
        data = self.get_bytes(key)
        return None if data is None else np.load(io.BytesIO(data), allow_pickle=False)

    def put_array(self, key: str, array: np.ndarray) -> None:
        """Store one array as ``.npy`` bytes."""
        buf = io.BytesIO()
        np.save(buf, np.asarray(array), allow_pickle=False)
        self.put_bytes(key, buf.getvalue())

    # ------------------------------------------------------------------ per-text vectors
    def get_vectors(self, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """Look up one float32 vector per key.

        Returns ``(found, matrix)``: ``found`` a bool mask over ``keys``; ``matrix`` of shape
        ``(len(keys), dim)`` with the stored rows where found and zeros elsewhere, or None when nothing
        was found. Repeated keys are answered at every position.
        """
        found = np.zeros(len(keys), dtype=bool)
        positions: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            positions.setdefault(bytes.fromhex(k), []).append(i)
        uniq = list(positions)
        rows: list[tuple[bytes, int, bytes]] = []
        with self._lock:
            db = self._db()
            for s in range(0, len(uniq), _LOOKUP_CHUNK):
                chunk = uniq[s : s + _LOOKUP_CHUNK]
                q = f"SELECT key, dim, data FROM vectors WHERE key IN ({','.join('?' * len(chunk))})"
                rows.extend(db.execute(q, chunk).fetchall())
        if not rows:
            return found, None
        dims = {r[1] for r in rows}
        if len(dims) != 1:
            raise ValueError(f"{self.root / 'store.sqlite'}: vectors of different sizes {sorted(dims)} under one "
                             "lookup; the keys mix models (the identity part of the key must name the model)")
        matrix = np.zeros((len(keys), dims.pop()), dtype=np.float32)
        for key, _dim, data in rows:
            vec = np.frombuffer(data, dtype="<f4")
            for i in positions[bytes(key)]:
                matrix[i] = vec
                found[i] = True
        return found, matrix

    def put_vectors(self, keys: Sequence[str], matrix: np.ndarray) -> None:
        """Store one float32 row per key, in one transaction (keys already present are kept as they are)."""
        matrix = np.ascontiguousarray(matrix, dtype="<f4")
        if matrix.ndim != 2 or matrix.shape[0] != len(keys):
            raise ValueError(f"put_vectors: {len(keys)} keys but a matrix of shape {matrix.shape}")
        dim = int(matrix.shape[1])
        rows = [(bytes.fromhex(k), dim, matrix[i].tobytes()) for i, k in enumerate(keys)]
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR IGNORE INTO vectors(key, dim, data) VALUES (?, ?, ?)", rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def count(self, table: str = "vectors") -> int:
        """Number of rows in ``vectors`` or ``blobs`` (file blobs not counted)."""
        if table not in ("vectors", "blobs"):
            raise ValueError(f"count: table must be 'vectors' or 'blobs', not {table!r}")
        with self._lock:
            return int(self._db().execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


class EmbeddingCache:
    """Embeddings through the store: cached rows are read, only the misses are encoded.

    Key of one text: ``content_key("embed:" + kind, embedder.cache_identity(kind), text)``; the identity
    names the model weights and every setting that changes the vector (prefix, max_seq_length). An embedder whose
    vectors depend on the passages it serves (static int8 scales calibrated on the corpus, lab.models.int8) has
    ``calibrate(passages)``; it is called with the passages before their identity is read.
    ``hits``/``misses`` count texts (not unique texts) over this object's life; ``encoded`` counts the
    unique texts sent to the embedder.
    """

    def __init__(self, cache: Cache | str | Path, chunk_size: int = 512, progress: bool = True):
        self.cache = cache if isinstance(cache, Cache) else Cache(cache)
        self.chunk_size = int(chunk_size)
        self.progress = progress
        self.hits = self.misses = self.encoded = 0

    def encode(self, embedder: Any, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """float32 matrix ``(len(texts), dim)`` in input order; misses are encoded in chunks (longest
        first) and each chunk is stored as soon as it is done, so an interrupted encode keeps its work."""
        if kind not in ("passage", "query"):
            raise ValueError(f"EmbeddingCache.encode: kind must be 'passage' or 'query', not {kind!r}")
        texts = list(texts)
        calibrate = getattr(embedder, "calibrate", None)
        if kind == "passage" and calibrate is not None:  # vectors that depend on the corpus (static int8 scales)
            calibrate(texts)
        ident = embedder.cache_identity(kind)
        keys = [content_key("embed:" + kind, ident, t) for t in texts]
        found, matrix = self.cache.get_vectors(keys)
        if matrix is None:
            matrix = np.zeros((len(texts), embedder.dim), dtype=np.float32)
        n_miss = int((~found).sum())
        self.hits += len(texts) - n_miss
        self.misses += n_miss
        if n_miss:
            miss_pos: dict[str, list[int]] = {}
            for i in np.flatnonzero(~found):
                miss_pos.setdefault(keys[i], []).append(int(i))
            todo = sorted(miss_pos, key=lambda k: -len(texts[miss_pos[k][0]]))  # longest first: even padding
            chunks = [todo[s : s + self.chunk_size] for s in range(0, len(todo), self.chunk_size)]

            desc = f"encode {len(todo)} {kind}s ({getattr(embedder, 'name', '')}, {self.chunk_size}/step)"
            for chunk in progress_items(chunks, desc=desc, total=len(todo), enabled=self.progress and len(chunks) > 1,
                                        unit=kind, phase="encoding"):
                batch_texts = [texts[miss_pos[k][0]] for k in chunk]
                vecs = _encode(embedder, batch_texts, kind)
                self.cache.put_vectors(chunk, vecs)
                self.encoded += len(chunk)
                for k, v in zip(chunk, vecs, strict=True):
                    matrix[miss_pos[k]] = v
        return matrix


def _encode(embedder: Any, texts: list[str], kind: str) -> np.ndarray:
    out = embedder.encode_queries(texts) if kind == "query" else embedder.encode_passages(texts)
    out = np.asarray(out, dtype=np.float32)
    if out.shape != (len(texts), embedder.dim):
        raise ValueError(f"{embedder.identity}: encoder returned shape {out.shape} for {len(texts)} texts "
                         f"of dim {embedder.dim}")
    return out



def clear_memos() -> None:
    """Empty every :class:`Memo` of this process (e.g. to time a pass as a fresh process would run it)."""
    for memo in list(_MEMOS):
        memo.clear()


class Memo:
    """An in-process memo of values computed from content: ``key -> value``, the least recently used entries
    dropped beyond ``max_items``. For cheap-to-keep results that every config of a sweep recomputes (a document's
    token offsets, a chunk text's BM25 tokens): keys must name the content and everything that shapes the value
    (e.g. ``(tokenizer identity, text)``), as the on-disk :class:`Cache`'s keys do; values are shared, never
    mutated by callers. ``hits``/``misses`` count lookups over the memo's life."""

    def __init__(self, max_items: int = 1_000_000):
        self.max_items = int(max_items)
        self._items: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        _MEMOS.add(self)

    def __len__(self) -> int:
        return len(self._items)

    def get_many(self, keys: Sequence[Hashable]) -> list[Any]:
        """The value of each key, None where absent (counted as misses)."""
        out: list[Any] = []
        with self._lock:
            items = self._items
            for k in keys:
                v = items.get(k)
                if v is None:
                    self.misses += 1
                else:
                    items.move_to_end(k)
                    self.hits += 1
                out.append(v)
        return out

    def put_many(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        """Store ``values`` under ``keys`` (None values are not stored), then drop the oldest beyond ``max_items``."""
        with self._lock:
            items = self._items
            for k, v in zip(keys, values, strict=True):
                if v is not None:
                    items[k] = v
                    items.move_to_end(k)
            while len(items) > self.max_items:
                items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0
