"""Resume: what decides a run's numbers, and whether a finished run can stand for a config again.

A finished run is reused only when everything that decides its numbers is the same as now:

- the config (:func:`lab.core.flat.config_hash`, the same hash the sweep always used);
- the content of every dataset the config names: the ``dataset`` key and any ``*_dataset`` key holding a folder
  (:func:`lab.data.fingerprint.fingerprint`, content only: a copy elsewhere is the same dataset);
- the weights of every model the run used: the run records them (:func:`lab.models.weights.weights_record` of its
  strategy's description, tag ``identity.models``, written by :func:`lab.tracking.results.log_result`) and the weights
  found at the recorded paths now are hashed again (memoised by path, size and mtime, so this costs a ``stat``);
  a path is recorded in :func:`lab.core.paths.public_path` form (repo-relative, ``site-packages/...``, ``~/...``,
  ``$LAB_CACHE_DIR/...`` or as the user gave it) and read back by :func:`lab.core.paths.resolve_public_path`
  (an absolute path recorded by an older run is used as it is);
  a remote model (an OpenAI-compatible endpoint) is identified by its name only;
- the metrics version (``lab.METRICS_VERSION``, tag ``metrics_version``);
- for runs that used a sentence-transformers model (identity ``st:...``) and configs that do not pin ``backend``:
  the default encoding backend (:data:`lab.models.backends.DEFAULT_BACKEND`, tag ``identity.encoder_backend``;
  a run without the tag was encoded when the default was ``torch``): a new default changes the vectors, so a run
  encoded under the old one does not stand for the config (found when the default moved from torch to openvino
  bf16: ORD-QA hybrid 0.5894 -> 0.5870, and a rerun sweep kept the torch row beside new openvino rows);
- the code version (git commit of the package, tag ``git_commit``) only when asked (``--rerun-on-code-change``);
  it is always recorded. A dirty tree records ``<commit>-dirty``, so uncommitted edits are not told apart.

Runs written before identities were recorded (no ``identity.models`` tag) are not reused: the reason says so and
the config runs once more, after which its run carries the tags. Among several finished runs of a config the
newest reusable one is taken (a dataset put back to an earlier state finds its earlier run); when none is
reusable the reason is the newest run's.

Reasons name the run they compare with by the first 8 characters of its id: "dataset changed since run
1f44446e (corpus.jsonl)", "model all-MiniLM-L6-v2 changed since run 1f44446e", "metrics version changed since
run 1f44446e (1 -> 2)", "code changed since run 1f44446e (3f0c2a1b -> 9d8e7f60)".
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import lab
from lab.core.errors import DataError
from lab.core.flat import config_hash, flatten_values
from lab.core.paths import resolve_public_path, resolve_repo_path
from lab.data.fingerprint import file_fingerprints, fingerprint
from lab.models.backends import DEFAULT_BACKEND
from lab.models.weights import default_memo, weights_sha256
from lab.tracking.store import TAG_MODELS, git_commit

#: Tags of the run identity (the sweep writes the first four when it creates a run; log_result writes models).
TAG_VERSION = "identity.version"
TAG_DATASETS = "identity.datasets"
TAG_DATASET_FILES = "identity.dataset_files"
TAG_CODE = "identity.code"
TAG_REASON = "sweep.rerun_reason"
TAG_ENCODER = "identity.encoder_backend"
#: the default encoding backend a run without :data:`TAG_ENCODER` was made under (before backends existed)
LEGACY_ENCODER = "torch"
IDENTITY_VERSION = "1"
#: a tag longer than this is not written (per-file fingerprints of a dataset with very many files)
_MAX_FILES_TAG = 6000


@dataclass(frozen=True)
class RunIdentity:
    """What decides a config's numbers before it runs (models are checked against what the run recorded)."""

    config_hash: str
    datasets: dict = field(default_factory=dict)        # config key -> dataset fingerprint
    dataset_files: dict = field(default_factory=dict)   # config key -> {file: sha256[:16]}
    metrics_version: str = ""
    code_version: str = ""
    include_code: bool = False
    encoder_backend: str = ""  # the default encoding backend; "" when the config pins ``backend``

    def tags(self) -> dict[str, str]:
        """The tags a run made for this identity carries (see the module docstring)."""
        out = {TAG_VERSION: IDENTITY_VERSION, TAG_DATASETS: _dumps(self.datasets), TAG_CODE: self.code_version,
               "metrics_version": self.metrics_version}
        if self.encoder_backend:
            out[TAG_ENCODER] = self.encoder_backend
        files = _dumps(self.dataset_files)
        if len(files) <= _MAX_FILES_TAG:
            out[TAG_DATASET_FILES] = files
        return out

    def claim_key(self, replaces: str | None = None) -> str:
        """What a run made for this identity claims (lab.tracking.claims): the config hash, dataset content,
        metrics version, default encoder and (only when it counts) the code, hashed; the same for every sweep
        that would make the same numbers, whatever its name.

        ``replaces``: the finished run of the config that no longer stands for it (a reason the key does not
        hold, such as changed model weights). It is part of the key then, so that old run, whose key lacks it,
        does not win the election and the config runs again; sweeps that replace the same run share the key."""
        key = {"config": self.config_hash, "datasets": self.datasets, "metrics": self.metrics_version,
               "encoder": self.encoder_backend, "code": self.code_version if self.include_code else ""}
        return config_hash({**key, "replaces": replaces} if replaces else key)


@dataclass
class Decision:
    """For one config: ``run_id`` of the finished run that stands for it (None: run it), ``previous_run_id`` the
    run the reason compares with, ``reason`` why it runs ("" when reused)."""

    run_id: str | None
    previous_run_id: str | None
    reason: str


def _dumps(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _loads(text: str | None):
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def dataset_keys(config: Mapping) -> dict[str, str]:
    """``{dotted key: value}`` of the config leaves naming a dataset: ``dataset`` and ``*_dataset`` string values."""
    return {k: v for k, v in flatten_values(config).items() if isinstance(v, str) and v
            and (k.rsplit(".", 1)[-1] == "dataset" or k.rsplit(".", 1)[-1].endswith("_dataset"))}


def run_identity(config: Mapping, repo_root: str | Path | None = None, include_code: bool = False,
                 memo: dict | None = None, where: str = "") -> RunIdentity:
    """The identity of ``config`` now. Dataset paths are read from ``repo_root`` when relative (lab.core.paths); the
    ``dataset`` key must name an existing folder (DataError naming it and ``where`` otherwise, before any work);
    other ``*_dataset`` keys count when they name a folder. ``memo``: {absolute path: (fingerprint, files)},
    shared across the configs of a sweep so each folder is read once."""
    memo = {} if memo is None else memo
    datasets, files = {}, {}
    for key, value in dataset_keys(config).items():
        path = resolve_repo_path(value, repo_root)
        if not path.is_dir():
            if key == "dataset":
                raise DataError(path, "dataset folder not found" + (f" ({where})" if where else ""),
                                hint="the sweep stopped before running anything; restore the folder or fix the "
                                "spec's dataset")
            continue
        k = str(path.resolve())
        if k not in memo:
            memo[k] = (fingerprint(path), file_fingerprints(path))
        datasets[key], files[key] = memo[k]
    return RunIdentity(config_hash(config), datasets, files, str(lab.METRICS_VERSION), git_commit(), include_code,
                       "" if pins_backend(config) else DEFAULT_BACKEND)


def pins_backend(config: Mapping) -> bool:
    """Whether the config sets an encoding ``backend`` itself (any key named ``backend``, e.g. ``params.backend``)."""
    return any(k.rsplit(".", 1)[-1] == "backend" and v not in (None, "") for k, v in flatten_values(config).items())


def recorded_datasets(tags: Mapping[str, str]) -> dict[str, str] | None:
    """The dataset fingerprints a run recorded: ``identity.datasets``, else ``{"dataset": dataset_fingerprint}``
    (what lab.tracking.results.log_result has always logged), else None."""
    got = _loads(tags.get(TAG_DATASETS))
    if isinstance(got, dict):
        return got
    fp = tags.get("dataset_fingerprint")
    return {"dataset": fp} if fp else None


def recorded_models(tags: Mapping[str, str]) -> list[dict] | None:
    """The models a run recorded (``identity.models``), or None when it recorded none (an older run)."""
    got = _loads(tags.get(TAG_MODELS))
    return got if isinstance(got, list) else None


def reuse_decision(previous_run, identity: RunIdentity, weights: Callable[[str], str | None] | None = None) -> str:
    """Why ``previous_run`` (an MLflow Run of the same config) cannot stand for ``identity`` now; "" when it can.
    Several reasons are joined by "; ". ``weights``: path (a recorded path resolved by
    :func:`lab.core.paths.resolve_public_path`) -> current weights sha256 (default
    :func:`lab.models.weights.weights_sha256` with the LAB_CACHE_DIR memo)."""
    tags = previous_run.data.tags
    since = f"since run {previous_run.info.run_id[:8]}"
    reasons = []
    if tags.get("config_hash") not in (None, identity.config_hash):
        reasons.append(f"config changed {since}")

    before = recorded_datasets(tags)
    if identity.datasets and before is None:
        reasons.append(f"run {previous_run.info.run_id[:8]} recorded no dataset fingerprint")
    elif identity.datasets:
        old_files = _loads(tags.get(TAG_DATASET_FILES)) or {}
        for key, fp in identity.datasets.items():
            if before.get(key) == fp:
                continue
            changed = _changed_files(old_files.get(key), identity.dataset_files.get(key))
            reasons.append(f"{key} changed {since}" + (f" ({', '.join(changed)})" if changed else ""))

    models = recorded_models(tags)
    if models is None:
        reasons.append(f"run {previous_run.info.run_id[:8]} recorded no model identities (logged before they were "
                       "recorded, or by a notebook that does not call lab.tracking.results.log_result)")
    else:
        if weights is None:
            memo = default_memo()

            def weights(path, memo=memo):
                return weights_sha256(path, memo)
        for m in models:
            path, old = m.get("path"), m.get("sha256")
            if not path or not old:
                continue  # a remote model: its name is part of the config
            now = weights(str(resolve_public_path(path)))
            name = m.get("name") or m.get("identity") or path
            if now is None:
                reasons.append(f"model {name} is no longer at {path}")
            elif now != old:
                reasons.append(f"model {name} changed {since}")

    if identity.encoder_backend and any(str(m.get("identity", "")).startswith("st:") for m in models or []):
        old_e = tags.get(TAG_ENCODER) or LEGACY_ENCODER
        if old_e != identity.encoder_backend:
            reasons.append(f"default encoding backend changed {since} ({old_e} -> {identity.encoder_backend}; "
                           "set params.backend to pin one)")

    old_v = tags.get("metrics_version")
    if old_v != identity.metrics_version:
        reasons.append(f"metrics version changed {since} ({old_v or 'none'} -> {identity.metrics_version})")
    if identity.include_code:
        old_c = tags.get(TAG_CODE) or tags.get("git_commit") or "unknown"
        if old_c != identity.code_version or old_c == "unknown":
            reasons.append(f"code changed {since} ({old_c[:8]} -> {identity.code_version[:8]})")
    return "; ".join(reasons)


def _changed_files(old: Mapping | None, new: Mapping | None) -> list[str]:
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return []
    names = sorted(set(old) | set(new))
    return [n + ("" if n in old and n in new else " added" if n in new else " removed")
            for n in names if old.get(n) != new.get(n)]


def finished_candidates(cl, experiment_id: str, hashes: set[str]) -> dict[str, list]:
    """``{config_hash: [FINISHED runs, newest first]}`` of the experiment (sweep parents left out)."""
    runs, token = [], None
    while True:
        page = cl.search_runs([experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=1000,
                              page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    out: dict[str, list] = {}
    for r in runs:
        h = r.data.tags.get("config_hash")
        if h in hashes and r.data.tags.get("sweep.role") != "parent":
            out.setdefault(h, []).append(r)
    for lst in out.values():
        lst.sort(key=lambda r: r.info.start_time, reverse=True)
    return out


def decide(cl, experiment_id: str | None, identities: Sequence[RunIdentity],
           weights: Callable[[str], str | None] | None = None) -> list[Decision]:
    """One :class:`Decision` per identity (see the module docstring)."""
    if experiment_id is None:
        return [Decision(None, None, "not run before") for _ in identities]
    if weights is None:
        memo, seen = default_memo(), {}

        def weights(path):
            if path not in seen:
                seen[path] = weights_sha256(path, memo)
            return seen[path]
    cands = finished_candidates(cl, experiment_id, {i.config_hash for i in identities})
    out = []
    for ident in identities:
        runs = cands.get(ident.config_hash, [])
        if not runs:
            out.append(Decision(None, None, "not run before"))
            continue
        first_reason = None
        for r in runs:
            reason = reuse_decision(r, ident, weights)
            if not reason:
                out.append(Decision(r.info.run_id, r.info.run_id, ""))
                break
            first_reason = first_reason or reason
        else:
            out.append(Decision(None, runs[0].info.run_id, first_reason))
    return out
