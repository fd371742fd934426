"""The Ray executor: configs as Ray tasks on a cluster or on a local instance, the notebook and datasets staged in
the job's working_dir, a run left RUNNING by a dead worker ended FAILED."""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from lab.core.errors import ConfigError
from lab.core.paths import repo_root
from lab.models.llm import THREADS_ENV
from lab.tracking.lifecycle import TAG_ERROR
from lab.tracking.store import TAG_PARENT, search_all_runs, set_tags
from lab.workbench.sweep.execute import execute_config, run_client
from lab.workbench.sweep.local import execute_warm, mark_last
from lab.workbench.sweep.outcome import NOTEBOOK_ARTIFACT_DIR, TAG_HASH, ConfigOutcome, SweepTask

TAG_RAY_NODE = "sweep.ray_node_id"
TAG_RAY_NODE_IP = "sweep.ray_node_ip"
TAG_STAGED = "sweep.staged"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def run_ray(tasks: list[SweepTask], jobs: int, address: str | None,
             warm_kernels: bool = True) -> Iterator[ConfigOutcome]:
    """Configs as Ray tasks (one CPU each), at most ``max(jobs, 1)`` in flight, on the cluster at ``address``
    or on a local instance started here (2 CPUs, no dashboard) and shut down afterwards.

    Workers need no shared filesystem: the notebook and each config's dataset folder travel in the job's
    ``runtime_env`` working_dir (:func:`stage_for_ray`); runs and the executed notebook go to the tracking store
    (use an ``http://`` server when workers are on other machines). A task whose worker dies (killed, out of memory,
    node lost) is not retried: its run, left RUNNING by the dead worker, is ended FAILED with tag ``error`` and the
    sweep goes on; a rerun runs that config again."""
    ray = import_ray(address)
    started = False
    with tempfile.TemporaryDirectory(prefix="lab-ray-stage-") as stage:
        staged = stage_for_ray(tasks, Path(stage))
        if not ray.is_initialized():
            ray.init(**ray_init_args(address), runtime_env={"working_dir": stage}, log_to_driver=False)
            started = True
        else:  # a Ray session the caller started: the job's runtime_env is the caller's; send ours per task
            staged = [replace(t, runtime_env={"working_dir": stage}) for t in staged]
        try:
            yield from ray_loop(ray, staged, jobs, warm_kernels)
        finally:
            if started:
                ray.shutdown()


def ray_loop(ray, tasks: list[SweepTask], jobs: int, warm_kernels: bool) -> Iterator[ConfigOutcome]:
    remote = ray.remote(num_cpus=1, max_retries=0)(execute_on_ray)
    queue = mark_last(tasks, jobs)
    inflight: dict = {}
    while queue or inflight:
        while queue and len(inflight) < max(jobs, 1):
            t = queue.pop(0)
            env, t = t.runtime_env, replace(t, runtime_env=None)
            inflight[(remote.options(runtime_env=env) if env else remote).remote(t, warm_kernels)] = t
        done, _ = ray.wait(list(inflight), num_returns=1)
        t = inflight.pop(done[0])
        try:
            yield ray.get(done[0])
        except Exception as exc:  # noqa: BLE001 - a task whose worker died: recorded, the sweep goes on
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            yield t.outcome("FAILED", run_id=fail_orphan_run(t, f"Ray worker died: {error}"), error=error)


def import_ray(address: str | None):
    """Ray, imported with what raglab needs set first: on a loopback address, Ray keeps 127.0.0.1 (it otherwise
    swaps it for the machine's network address: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``); with an explicit
    address and a token on this machine (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``),
    token authentication is turned on for the driver (Ray turns it on by itself only for a cluster it finds
    without an address). Variables the user set are left as they are."""
    if address and ray_host(address) in _LOOPBACK:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if address and "RAY_AUTH_MODE" not in os.environ and ray_token_available():
        os.environ["RAY_AUTH_MODE"] = "token"
    try:
        import ray
    except ImportError:
        raise ConfigError("executor 'ray' needs Ray: pip install 'raglab[ray]' (or pip install ray)") from None
    return ray


def ray_host(address: str) -> str:
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return host.strip("[]")


def ray_token_available() -> bool:
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or Path(path or Path.home() / ".ray" / "auth_token").is_file()


def ray_init_args(address: str | None) -> dict:
    """ray.init arguments: the cluster at ``address`` (this driver on 127.0.0.1 when the address is loopback), or
    a new local instance of 2 CPUs without a dashboard (``address="local"``: never a cluster Ray finds by itself
    through RAY_ADDRESS or a stale /tmp/ray/ray_current_cluster; ``--ray-address auto`` asks for that)."""
    if not address:
        return {"address": "local", "num_cpus": 2, "include_dashboard": False}
    args: dict = {"address": address}
    if ray_host(address) in _LOOPBACK:
        args["_node_ip_address"] = "127.0.0.1"
    return args


def stage_for_ray(tasks: list[SweepTask], stage: Path) -> list[SweepTask]:
    """Copy each task's notebook and dataset folder under ``stage`` (the job's working_dir: Ray uploads it to the
    cluster and unpacks it for every worker) and return the tasks with those paths made relative to it; the
    executed notebook is written in the worker's own temporary folder (it reaches the driver as the run's
    artifact). Other files a config names must be on a path every node sees."""
    places: dict[str, str] = {}

    def place(src: str, kind: str) -> str:
        if src not in places:
            rel = f"{kind}/{sum(v.startswith(kind + '/') for v in places.values()):02d}_{Path(src).name}"
            copy = shutil.copytree if Path(src).is_dir() else shutil.copy2
            (stage / kind).mkdir(parents=True, exist_ok=True)
            copy(src, stage / rel)
            places[src] = rel
        return places[src]

    out = []
    for t in tasks:
        inject = dict(t.inject)
        if isinstance(inject.get("dataset"), str) and Path(inject["dataset"]).is_dir():
            inject["dataset"] = place(inject["dataset"], "data")
        out.append(replace(t, inject=inject, notebook=place(t.notebook, "notebook"), staged=True))
    return out


def execute_on_ray(task: SweepTask, warm_kernels: bool = True) -> ConfigOutcome:
    """A Ray task: tag the run with this node, resolve the staged paths in this worker's working_dir, run the
    config (:func:`execute_config`, with a prewarmed kernel unless ``warm_kernels`` is False)."""
    import ray  # the optional package (raglab[ray]): only a Ray worker runs this

    os.environ.setdefault(THREADS_ENV, "1")  # the one CPU this task reserved (num_cpus=1), for a local LLM
    tags = {**task.tags, TAG_RAY_NODE: ray.get_runtime_context().get_node_id(),
            TAG_RAY_NODE_IP: ray.util.get_node_ip_address()}
    if not task.staged:
        task = replace(task, tags=tags)
        return execute_warm(task) if warm_kernels else execute_config(task)
    here = Path.cwd()  # the job's working_dir, unpacked by Ray on this node
    inject = dict(task.inject)
    if isinstance(inject.get("dataset"), str) and not Path(inject["dataset"]).is_absolute():
        inject["dataset"] = str(here / inject["dataset"])
    scratch = tempfile.mkdtemp(prefix="lab-ray-nb-")  # removed after: the notebook goes to the run's artifacts
    task = replace(task, staged=False, notebook=str(here / task.notebook), inject=inject,
                   output_path=str(Path(scratch) / Path(task.output_path).name),
                   tags={**tags, TAG_STAGED: "runtime_env"})
    default_cache_dir()
    try:
        out = execute_warm(task) if warm_kernels else execute_config(task)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    name = Path(task.output_path).name
    return replace(out, notebook=f"artifact {NOTEBOOK_ARTIFACT_DIR}/{name} of run {out.run_id}")


def default_cache_dir() -> None:
    """Outside a raglab checkout (raglab installed from a wheel on a worker node) ``.cache`` has no repo root to
    sit under: LAB_CACHE_DIR defaults to ``~/.cache/raglab`` then (kernels inherit it)."""
    try:
        repo_root()
    except ConfigError:
        os.environ.setdefault("LAB_CACHE_DIR", str(Path.home() / ".cache" / "raglab"))


def fail_orphan_run(task: SweepTask, error: str) -> str | None:
    """End FAILED (tag ``error``) the run a dead worker left RUNNING for this task's config; returns its id (None
    when the worker died before creating it)."""
    cl = run_client(task.tracking_uri)
    found = None
    for r in search_all_runs(cl, task.experiment_id, f"tags.`{TAG_HASH}` = '{task.config_hash}'"):
        if r.data.tags.get(TAG_PARENT) == task.parent_run_id and r.info.status == "RUNNING":
            set_tags(r.info.run_id, {TAG_ERROR: error}, cl=cl)
            cl.set_terminated(r.info.run_id, "FAILED")
            found = r.info.run_id
    return found

