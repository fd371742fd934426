"""MLflow tracking: one store per tracking root; keys, params, metrics, tags and artifacts of runs.

Conventions
- Store: ``tracking_uri(tracking_root)`` is ``sqlite:///<abs root>/mlflow.db``; artifacts live under
  ``<abs root>/artifacts``
  (the artifact_location of every experiment created here). A relative root is relative to the repository root
  (see :mod:`lab.core.paths`), so notebooks and the CLI share one store whatever their working directory. A root
  that is already a URI (``sqlite:///...``, ``http://host:5000``) is used as it is.
- Metric names: MLflow refuses ``@``; :func:`mlflow_metric_name` maps ``@`` to ``_at_`` ("ndcg@10" ->
  "ndcg_at_10") and :func:`metric_name_from_mlflow` maps back. CI bounds are ``<metric>_ci_low`` /
  ``<metric>_ci_high`` (mapped the same way). Nothing else renames metrics.
- Params: dotted keys from :func:`lab.core.flat.flatten`. Plain keys hold the config as requested (a sweep logs
  its config before the notebook runs); when the experiment resolved a key to a different value (e.g.
  relevance "auto" -> "doc", a dataset path -> its name), that value goes to ``resolved.<key>``. Strategy
  descriptions (model identities, defaults) go to ``retriever.<key>``.
- Tag ``identity.models`` (:data:`TAG_MODELS`): the models the strategy used (name, identity, weights path, sha256
  of the weights on disk), so a later sweep can tell whether they changed (lab.workbench.resume).
- Tag ``config_hash``: :func:`lab.core.flat.config_hash` of the config that made the run: the sweep config for
  sweep runs (set by the sweep before execution), ``result.config`` for runs logged directly.
- A run's lifecycle is :func:`lab.tracking.lifecycle.tracked_run`; logging an experiment's result into a run is
  :mod:`lab.tracking.results`.
- Several processes at once: a sqlite store is created or migrated under a file lock (``<db>.lock``, see
  :func:`ensure_store`), once per process, by every path that opens it (:func:`client`): run, sweep and its
  notebooks, testset, report. A store in a folder this process cannot write is opened without the lock (read-only
  commands such as ``lab compare`` and ``lab report`` work on it).
- Storage faults: :func:`storage_fault` turns a corrupt store, a read-only store written to and a full disk into one
  line naming the file and what to do; :func:`ensure_store` raises it as a TrackingError, and ``lab`` prints it for
  any command that meets one later.
"""
from __future__ import annotations

import errno
import math
import os
import re
import subprocess
import tempfile
import time
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import unquote, urlparse

import pandas as pd
from filelock import FileLock, Timeout

import lab
from lab.core.errors import ConfigError, TrackingError
from lab.core.flat import flatten, format_value
from lab.core.paths import resolve_repo_path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
#: Bounds on every call to a tracking server, for this process and the notebooks it starts (they inherit the
#: environment); a value already set wins. MLflow's own defaults (120 s per request, 7 retries with a doubling
#: backoff) let one call to a server that went away wait for minutes; these give up within about a minute.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "30", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
               "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5"}
for _name, _value in HTTP_LIMITS.items():
    os.environ.setdefault(_name, _value)

#: Packages whose versions are tagged on every run (distribution names); absent ones are skipped.
TRACKED_PACKAGES = ("raglab", "torch", "sentence-transformers", "bm25s", "faiss-cpu", "mlflow", "numpy")
#: Artifact names of a logged result.
PER_QUERY_ARTIFACT = "per_query.parquet"
RUN_ARTIFACT = "run.trec"
RESULT_ARTIFACT = "result.json"
#: Tag holding the models a result used, as :func:`lab.models.weights.weights_record` gives them (sorted-key JSON):
#: what a later sweep checks to tell whether the weights changed (see lab.workbench.resume).
TAG_MODELS = "identity.models"
#: Tags of sweep runs read by every layer that lists runs (lab.workbench.sweep writes them): a child run's parent
#: (MLflow's own nesting tag) and ``sweep.role=parent`` on a sweep's parent run.
TAG_PARENT = "mlflow.parentRunId"
TAG_ROLE = "sweep.role"
MAX_PARAM = 6000
MAX_TAG = 8000
_BAD_KEY = re.compile(r"[^/\w.\- :]")


# ----------------------------------------------------------------------------------------------------------
# store
# ----------------------------------------------------------------------------------------------------------
def is_uri(tracking_root: str | Path) -> bool:
    """True when ``tracking_root`` is a tracking URI (``scheme://...`` or ``sqlite:...``), False for a folder."""
    s = str(tracking_root)
    return "://" in s or s.startswith("sqlite:")


def root_path(tracking_root: str | Path = "mlruns") -> Path:
    """Absolute folder of a tracking root: absolute kept, relative joined to the repo root (else the cwd)."""
    p = Path(tracking_root).expanduser()
    if p.is_absolute():
        return p
    try:
        return resolve_repo_path(p).resolve()
    except ConfigError:
        return p.resolve()


def tracking_uri(tracking_root: str | Path = "mlruns") -> str:
    """``sqlite:///<abs root>/mlflow.db`` (creating the folder), or ``tracking_root`` itself when it is a URI."""
    if is_uri(tracking_root):
        return str(tracking_root)
    folder = root_path(tracking_root)
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def artifact_location(tracking_root: str | Path = "mlruns") -> str | None:
    """``file://<abs root>/artifacts`` for a folder root; None (the server's default) for a URI root."""
    if is_uri(tracking_root):
        return None
    folder = root_path(tracking_root) / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder.as_uri()


#: sqlite stores this process has created or checked (see :func:`ensure_store`).
_READY: set[str] = set()
#: sqlite files this process opened (named by :func:`storage_fault` when a fault shows up later).
_OPENED: list[Path] = []
#: Seconds a process waits for another one creating or migrating the same store.
STORE_LOCK_TIMEOUT = 600


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for any other store)."""
    prefix = "sqlite:///"
    return Path(uri[len(prefix):]) if uri.startswith(prefix) and len(uri) > len(prefix) else None


def ensure_store(tracking_root: str | Path = "mlruns") -> str:
    """Create (or migrate) the sqlite store of ``tracking_root`` under an exclusive file lock beside the database, so
    processes starting on a new store at once do not race on its tables (MLflow creates them and runs the alembic
    migrations when it first opens a database; two at once fail with "table ... already exists" or "duplicate
    column"). Done once per process and store; other stores (http) are left to their server. Returns the URI."""
    uri = tracking_uri(tracking_root)
    db = sqlite_file(uri)
    if db is None or uri in _READY:
        return uri
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    db.parent.mkdir(parents=True, exist_ok=True)
    _OPENED.append(db)
    artifacts = (db.parent / "artifacts").as_uri()
    if db.is_file() and not _writable(db.parent):  # read-only: nothing to create or migrate, no lock to take
        _open_sqlite(SqlAlchemyStore, uri, artifacts, db)
        _READY.add(uri)
        return uri
    lock = FileLock(f"{db}.lock")
    try:
        with lock.acquire(timeout=STORE_LOCK_TIMEOUT):
            # a folder root's artifacts folder; for a URI root (artifact_location None) the one beside the db
            _open_sqlite(SqlAlchemyStore, uri, artifact_location(tracking_root) or artifacts, db)
    except Timeout:
        raise TrackingError(f"{db}: another process has held the store's lock ({lock.lock_file}) for more than "
                            f"{STORE_LOCK_TIMEOUT} s; is a migration stuck? end that process and retry") from None
    except OSError as exc:
        raise TrackingError(storage_fault(exc, db) or f"{db}: cannot open the store: {exc}") from None
    _READY.add(uri)
    return uri



def existing_store(tracking_root: str | Path = "mlruns") -> None:
    """Refuse (ConfigError, one line) a folder root, or a ``sqlite:///`` URI, that holds no store yet: for commands
    that only read one (``lab compare``, ``lab report``), so a mistyped ``--tracking-root`` creates nothing.
    A server URI is left to its server."""
    if is_uri(tracking_root) and not str(tracking_root).startswith("sqlite:"):
        return
    db = sqlite_file(str(tracking_root)) if is_uri(tracking_root) else root_path(tracking_root) / "mlflow.db"
    if db is not None and not db.is_file():
        where = db if is_uri(tracking_root) else db.parent
        raise ConfigError(f"--tracking-root {tracking_root}: no MLflow store at {where} (no mlflow.db); check the path "
                          "(a typo?), or log runs there first (lab sweep SPEC --tracking-root ROOT)")


def read_only(tracking_root: str | Path = "mlruns") -> bool:
    """True when ``tracking_root`` is a sqlite store whose folder this process cannot write (a read-only mount, a copy
    without write permission): read-only commands work on it, nothing can be logged into it."""
    if is_uri(tracking_root) and not str(tracking_root).startswith("sqlite:"):
        return False
    db = sqlite_file(tracking_uri(tracking_root))
    return db is not None and db.parent.is_dir() and not _writable(db.parent)


def _writable(folder: Path) -> bool:
    """Whether this process can create files in ``folder`` (a real try: root ignores permission bits, not a
    read-only mount)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".lab-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def _open_sqlite(store_class, uri: str, artifacts: str, db: Path) -> None:
    """Open (create, migrate) the sqlite store; a storage fault becomes one TrackingError line (storage_fault)."""
    try:
        store_class(uri, artifacts)
    except Exception as exc:  # noqa: BLE001 - turned into one line when it is a storage fault, else re-raised
        line = storage_fault(exc, db)
        if line is None:
            raise
        raise TrackingError(line) from None


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its cause (or context), that one's, ... each once."""
    out: list[BaseException] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def storage_fault(exc: BaseException, db: str | Path | None = None) -> str | None:
    """One line for a storage fault anywhere in ``exc``'s chain, naming the store file (``db``, else the sqlite
    files this process opened) and what to do; None when ``exc`` is not one. Faults: a corrupt store ("database disk
    image is malformed", "file is not a database"), a read-only one written to, a full disk (ENOSPC, "database or
    disk is full")."""
    where = str(db) if db else (", ".join(dict.fromkeys(str(p) for p in _OPENED)) or "the MLflow store")
    written = str(db) if db else (", ".join(f"{p} (or its artifacts folder)" for p in dict.fromkeys(_OPENED))
                                  or "a file being written")
    for e in exception_chain(exc):
        text = str(e).splitlines()[0] if str(e) else ""
        low = text.lower()
        if "malformed" in low or "not a database" in low or "file is encrypted" in low:
            return (f"{where}: the MLflow store is corrupt ({text.split(') ', 1)[-1]}); move it aside (e.g. add "
                    ".corrupt to its name) to start an empty store there, or restore it from a backup, and run again")
        if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "disk is full" in low:
            path = getattr(e, "filename", None) or written
            return (f"{path}: no space left on the device; free some space and run again (what finished is kept, a "
                    "rerun resumes)")
        if (isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES)) or "readonly database" in low:
            path = getattr(e, "filename", None)
            stores = [Path(db).parent] if db else [p.parent for p in _OPENED]
            if path is not None and not any(Path(path).is_relative_to(s) for s in stores):
                strerror = e.strerror if isinstance(e, OSError) else None
                return f"{path}: {(strerror or text).lower()}; check the path and its permissions"
            return (f"{path or where}: the store is read-only and this command writes to it; run it on a writable "
                    "copy (--root FOLDER) or make the folder writable")
    return None


def client(tracking_root: str | Path = "mlruns"):
    """An :class:`mlflow.MlflowClient` on the store of ``tracking_root`` (no global tracking URI is set); the store is
    created or migrated first, under a lock (:func:`ensure_store`)."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=ensure_store(tracking_root))


#: Experiment tag that tells the MLflow 3 UI what kind of experiment it shows; "custom_model_development"
#: ("Model training" in the UI) opens on the runs table instead of the GenAI overview, which is empty for
#: retrieval runs. Every experiment raglab creates or reuses carries it (set only when absent).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def get_or_create_experiment(name: str, tracking_root: str | Path = "mlruns", cl=None) -> str:
    """Id of experiment ``name``, created with artifact_location under ``<root>/artifacts`` when absent, tagged
    :data:`EXPERIMENT_KIND_TAG` = :data:`EXPERIMENT_KIND` (an existing experiment without that tag gets it).

    A deleted experiment of that name is restored. Safe when two processes create it at once.
    """
    from mlflow.exceptions import MlflowException

    cl = cl or client(tracking_root)
    exp = cl.get_experiment_by_name(name)
    if exp is None:
        try:
            return cl.create_experiment(name, artifact_location=artifact_location(tracking_root),
                                        tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException:
            exp = cl.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        cl.restore_experiment(exp.experiment_id)
    if EXPERIMENT_KIND_TAG not in (exp.tags or {}):
        cl.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return exp.experiment_id


# ----------------------------------------------------------------------------------------------------------
# names and values
# ----------------------------------------------------------------------------------------------------------
def mlflow_metric_name(name: str) -> str:
    """MLflow-safe metric name: "@" -> "_at_" ("ndcg@10" -> "ndcg_at_10"); the one place names are mapped."""
    return str(name).replace("@", "_at_")


def metric_name_from_mlflow(name: str) -> str:
    """Inverse of :func:`mlflow_metric_name`: "_at_" -> "@" ("ndcg_at_10_ci_low" -> "ndcg@10_ci_low")."""
    return str(name).replace("_at_", "@")


def safe_key(key: str) -> str:
    """A param/tag key MLflow accepts: characters outside ``[/\\w.\\- :]`` become "_", at most 250 chars."""
    return _BAD_KEY.sub("_", str(key))[:250]


def truncate(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 15] + "...[truncated]"


# ----------------------------------------------------------------------------------------------------------
# environment tags
# ----------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def git_commit(folder: str | None = None) -> str:
    """HEAD commit of the repository holding ``folder`` (default: the package), + "-dirty" when the tree has
    uncommitted changes; "unknown" outside git or before the first commit. Takes no lock in that repository
    (``git rev-parse``, and ``git status`` under ``--no-optional-locks``)."""
    cwd = folder or str(Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        # --no-optional-locks: status never takes (or waits on) the user's .git/index.lock
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
                               cwd=cwd, capture_output=True, text=True, timeout=20)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@lru_cache(maxsize=None)
def package_versions() -> dict[str, str]:
    """``{distribution: version}`` of :data:`TRACKED_PACKAGES` that are installed."""
    out = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def environment_tags() -> dict[str, str]:
    """Tags naming the code that ran: git_commit, metrics_version, version.<package>."""
    tags = {"git_commit": git_commit(), "metrics_version": str(lab.METRICS_VERSION)}
    tags.update({f"version.{k}": v for k, v in package_versions().items()})
    return tags


def model_identities(describe: Mapping) -> dict[str, str]:
    """``{dotted key: value}`` of the leaves of a strategy description whose key names a model or backend."""
    return {k: v for k, v in flatten(describe).items()
            if any(w in k.lower().rsplit(".", 1)[-1] for w in ("model", "backend", "encoder", "embedder"))}


# ----------------------------------------------------------------------------------------------------------
# logging
# ----------------------------------------------------------------------------------------------------------
def log_params(run_id: str, params: Mapping[str, Any], cl=None, tracking_root: str | Path = "mlruns",
               conflict_prefix: str = "resolved.") -> dict[str, str]:
    """Log params (values formatted by :func:`lab.core.flat.format_value`) into a run, without ever failing on a
    key the run already holds: same value -> skipped; different value -> logged as ``conflict_prefix + key``.
    Returns what was logged, key -> value."""
    from mlflow.entities import Param

    cl = cl or client(tracking_root)
    existing = cl.get_run(run_id).data.params
    out: dict[str, str] = {}
    for key, value in params.items():
        key, text = safe_key(key), truncate(format_value(value), MAX_PARAM)
        if key in existing:
            if existing[key] == text:
                continue
            key = safe_key(conflict_prefix + key)
            if existing.get(key) == text:
                continue
        out[key] = text
    items = [Param(k, v) for k, v in out.items()]
    for i in range(0, len(items), 100):
        cl.log_batch(run_id, params=items[i:i + 100])
    return out


def log_metrics(run_id: str, metrics: Mapping[str, float], cl=None, tracking_root: str | Path = "mlruns",
                step: int = 0) -> None:
    """Log ``{name: value}`` metrics (names mapped by :func:`mlflow_metric_name`); NaN/None values are skipped."""

    from mlflow.entities import Metric

    cl = cl or client(tracking_root)
    ts = int(time.time() * 1000)
    items = [Metric(mlflow_metric_name(k), float(v), ts, step) for k, v in metrics.items()
             if v is not None and not math.isnan(float(v))]
    for i in range(0, len(items), 1000):
        cl.log_batch(run_id, metrics=items[i:i + 1000])


def set_tags(run_id: str, tags: Mapping[str, Any], cl=None, tracking_root: str | Path = "mlruns") -> None:
    """Set tags (values as str, truncated to MLflow's limit)."""
    from mlflow.entities import RunTag

    cl = cl or client(tracking_root)
    items = [RunTag(safe_key(k), truncate(str(v), MAX_TAG)) for k, v in tags.items() if v is not None]
    for i in range(0, len(items), 100):
        cl.log_batch(run_id, tags=items[i:i + 100])


def log_figure(fig, name: str, run_id: str, tracking_root: str | Path = "mlruns") -> str:
    """Save a matplotlib Figure as ``figures/<name>.png`` in the run's artifacts; returns the artifact path."""
    artifact = f"figures/{name if name.endswith('.png') else name + '.png'}"
    client(tracking_root).log_figure(run_id, fig, artifact)
    return artifact


def log_file(run_id: str, path: str | Path, artifact_path: str | None = None,
             tracking_root: str | Path = "mlruns") -> None:
    """Copy a local file into the run's artifacts (under ``artifact_path`` when given)."""
    client(tracking_root).log_artifact(run_id, str(path), artifact_path)


# ----------------------------------------------------------------------------------------------------------
# reading back
# ----------------------------------------------------------------------------------------------------------
def search_all_runs(cl, experiment_id: str, filter_string: str = "") -> list:
    """Every run of an experiment that matches ``filter_string`` (MLflow search syntax, e.g.
    ``"attributes.status = 'FINISHED'"``), all pages of 1000 read, in the order MLflow returns them."""
    runs, token = [], None
    while True:
        page = cl.search_runs([experiment_id], filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def artifact_file(run_id: str, artifact: str, dst: str | Path, tracking_root: str | Path = "mlruns", cl=None) -> Path:
    """Local path of one artifact of a run: read in place for a local (file://) store, else downloaded to ``dst``."""
    cl = cl or client(tracking_root)
    uri = cl.get_run(run_id).info.artifact_uri
    if uri.startswith("file://"):
        local = Path(unquote(urlparse(uri).path)) / artifact
        if local.exists():
            return local
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return Path(cl.download_artifacts(run_id, artifact, str(dst)))


def load_per_query(run_id: str, tracking_root: str | Path = "mlruns", cl=None):
    """The per-query table a run logged (DataFrame indexed by query_id as str, columns = metric labels)."""
    with tempfile.TemporaryDirectory(prefix="lab-pq-") as tmp:
        df = pd.read_parquet(artifact_file(run_id, PER_QUERY_ARTIFACT, tmp, tracking_root, cl))
    df.index = df.index.astype(str)
    return df
