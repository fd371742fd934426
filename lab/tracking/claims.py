"""Claims: no config runs twice when several sweeps (any spec name, any host) share an experiment.

The claim lives in the store itself (a run and its tags), so it works the same on a sqlite store and on a remote
MLflow server over HTTP; no file lock is involved.

Conventions
- A claimant creates its config's run RUNNING with :func:`claim_tags` (tag ``claim.key``: what the run stands for,
  e.g. the config hash joined with the dataset fingerprints; ``claim.host``, ``claim.pid``; ``claim.heartbeat``:
  unix seconds, refreshed by :class:`Heartbeat` while it works), then calls :func:`elect`.
- Election (create, then check): among the experiment's active runs with the same ``claim.key`` that are FINISHED,
  or RUNNING and not stale, a FINISHED run wins (the earliest); else the earliest RUNNING run wins, ordered by
  (start_time, run_id). Every claimant that sees the same runs names the same winner. A claimant that loses yields:
  it ends its own run KILLED and deletes it, then waits for the winner (:func:`wait_for`): FINISHED stands for
  its config; FAILED, KILLED or stale means claiming again.
- A claimant elects again just before ending its run FINISHED: two claimants whose runs were created so close
  together that neither saw the other at first both see both by then, and only one of them finishes.
- Stale (:func:`stale_reason`): a RUNNING claim whose process is gone (its pid is not alive, same host) or whose
  heartbeat is older than ``stale_after`` seconds (:data:`STALE_SECONDS`; a claim on another host can only be
  judged by it). An election ends stale claims KILLED with an ``error`` tag that says so: they are taken over.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass

from lab.tracking.lifecycle import TAG_ERROR
from lab.tracking.store import TAG_ROLE, search_all_runs, set_tags

TAG_KEY = "claim.key"
TAG_HOST = "claim.host"
TAG_PID = "claim.pid"
TAG_HEARTBEAT = "claim.heartbeat"
#: On a deleted run that yielded: the run it yielded to.
TAG_YIELDED_TO = "claim.yielded_to"
#: Seconds between heartbeats of a working claimant.
HEARTBEAT_SECONDS = 30.0
#: A RUNNING claim without a heartbeat for this long is stale (ten missed heartbeats; clocks of other hosts may
#: differ by a little).
STALE_SECONDS = 300.0
#: Seconds between two looks at the winner's status while waiting for it.
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`elect`: ``won`` (this run is the one that works), the winner's run id and status
    (RUNNING or FINISHED), and the run ids of stale claims this election ended KILLED."""

    won: bool
    winner_run_id: str
    winner_status: str
    taken_over: tuple[str, ...] = ()


def host() -> str:
    return socket.gethostname()


def claim_tags(key: str, now: float | None = None) -> dict[str, str]:
    """Tags a claimant's run is created with (see the module docstring)."""
    return {TAG_KEY: key, TAG_HOST: host(), TAG_PID: str(os.getpid()),
            TAG_HEARTBEAT: str(int(time.time() if now is None else now))}


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host is alive (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            return "\nState:\tZ" not in f.read()
    except OSError:
        return True


def stale_reason(run, stale_after: float = STALE_SECONDS, now: float | None = None) -> str:
    """Why a RUNNING claim is stale ("" when it is live or not RUNNING): its process is gone (same host), or its
    heartbeat is older than ``stale_after`` seconds."""
    if run.info.status != "RUNNING":
        return ""
    tags = run.data.tags
    pid = tags.get(TAG_PID, "")
    if tags.get(TAG_HOST) == host() and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
        return f"its process (pid {pid} on {tags[TAG_HOST]}) is gone"
    try:
        beat = float(tags.get(TAG_HEARTBEAT, ""))
    except ValueError:
        beat = run.info.start_time / 1000.0
    age = (time.time() if now is None else now) - beat
    return f"no heartbeat for {age:.0f} s (limit {stale_after:.0f} s)" if age > stale_after else ""


def claims_of(cl, experiment_id: str, key: str) -> list:
    """The experiment's active runs (sweep parents left out) claiming ``key``, in election order."""
    runs = search_all_runs(cl, experiment_id, f"tags.`{TAG_KEY}` = '{key}'")
    runs = [r for r in runs if r.data.tags.get(TAG_ROLE) != "parent" and r.data.tags.get(TAG_KEY) == key]
    return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))


def take_over(cl, run, reason: str) -> None:
    """End a stale claim KILLED with an ``error`` tag saying why (its config is claimed again)."""
    set_tags(run.info.run_id, {TAG_ERROR: f"claim taken over: {reason}"}, cl=cl)
    if cl.get_run(run.info.run_id).info.status == "RUNNING":
        cl.set_terminated(run.info.run_id, "KILLED")


def elect(cl, experiment_id: str, key: str, run_id: str, stale_after: float = STALE_SECONDS) -> Verdict:
    """Elect the run that works on ``key`` (``run_id`` is this claimant's RUNNING run); see the module docstring."""
    finished, running, taken = [], [], []
    for r in claims_of(cl, experiment_id, key):
        if r.info.status == "FINISHED":
            finished.append(r)
        elif r.info.status == "RUNNING":
            why = "" if r.info.run_id == run_id else stale_reason(r, stale_after)
            if why:
                take_over(cl, r, why)
                taken.append(r.info.run_id)
            else:
                running.append(r)
    pool = finished or running
    if not pool:  # our own run is not visible (yet): nothing else claims the key as far as we can tell
        return Verdict(True, run_id, "RUNNING", tuple(taken))
    winner = pool[0]
    return Verdict(winner.info.run_id == run_id, winner.info.run_id, winner.info.status, tuple(taken))


def yield_to(cl, run_id: str, winner_run_id: str) -> None:
    """Give up this claimant's run: tag whom it yielded to, end it KILLED (when still RUNNING) and delete it."""
    set_tags(run_id, {TAG_YIELDED_TO: winner_run_id}, cl=cl)
    if cl.get_run(run_id).info.status == "RUNNING":
        cl.set_terminated(run_id, "KILLED")
    cl.delete_run(run_id)


def wait_for(cl, run_id: str, stale_after: float = STALE_SECONDS, poll: float = POLL_SECONDS) -> tuple[str, str]:
    """Wait until the winner ``run_id`` ends or goes stale; returns (status, why): ("FINISHED", ""),
    ("FAILED"/"KILLED", its error tag), ("STALE", reason: it was taken over) or ("DELETED", "")."""
    while True:
        run = cl.get_run(run_id)
        if run.info.lifecycle_stage == "deleted":
            return "DELETED", ""
        if run.info.status != "RUNNING":
            return run.info.status, run.data.tags.get(TAG_ERROR, "")
        why = stale_reason(run, stale_after)
        if why:
            take_over(cl, run, why)
            return "STALE", why
        time.sleep(poll)


class Heartbeat:
    """Refresh a claim's ``claim.heartbeat`` tag every ``every`` seconds in a daemon thread, from :meth:`start`
    until :meth:`stop`. A failed refresh (the store is busy) is tried again at the next beat."""

    def __init__(self, cl, run_id: str, every: float = HEARTBEAT_SECONDS):
        self.cl, self.run_id, self.every = cl, run_id, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="lab-claim-heartbeat")

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                if self.cl.get_run(self.run_id).info.status != "RUNNING":
                    return  # the run ended (or was taken over): nothing to keep alive
                set_tags(self.run_id, {TAG_HEARTBEAT: str(int(time.time()))}, cl=self.cl)
            except Exception:  # noqa: BLE001 - a missed beat is tried again; staleness allows ten
                pass

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
