"""What a job running in another process is doing: a phase channel from the worker to whoever watches it.

A sweep runs each config in another process (a Papermill kernel, a pool worker, a Ray task), so its own progress
bar only counts configs. The channel: the environment variable :data:`ENV` names a JSON-lines file; while it is set,
the bars of :mod:`lab.core.progress` (a dense retriever encoding its passages, a search over the queries, a
rerank ...) append events to it, one JSON object per line:

- ``{"phase": "encoding", "detail": "all-MiniLM-L6-v2", "done": 3400, "total": 5183, "unit": "passage",
  "elapsed": 41.2, "t": <unix time>}``: at a phase's start (``done`` 0), at most once per :data:`MIN_INTERVAL`
  seconds while it runs, and at its end (``"end": true``);
- ``{"config": 3, "label": "dense", "strategy": "dense", "t": ...}``: written by the process that runs a config
  before it starts (:func:`announce`), so the watcher knows whose phases follow.

Each event is one ``write`` of one line on a file opened in append mode (atomic for lines this short on a local
filesystem), so a kernel and the worker that started it can share one file. A kernel inherits the variable from
the process that starts it (:func:`bind` sets it before kernels start). Phases of fewer than :data:`MIN_ITEMS`
items are not reported (one query encoded alone is not a phase). The watcher reads new lines with
:class:`PhaseTail` and shows them with :meth:`PhaseEvent.describe`: ``encoding 3,400/5,183 passages · 1 min left``.
A line that does not parse (a writer killed mid-line) is skipped.
"""
from __future__ import annotations

import contextvars
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

#: The environment variable naming the JSON-lines file a process reports its phases to.
ENV = "LAB_PHASE_FILE"
#: Seconds between two progress events of one phase (its start and end are always written).
MIN_INTERVAL = 1.0
#: Phases of fewer items are not reported.
MIN_ITEMS = 32
#: Reporters open in this context: a phase inside another (the encoder's own batches inside the embedding cache's
#: chunks) is the outer one's detail, so only the outermost reports.
_OPEN: contextvars.ContextVar[int] = contextvars.ContextVar("lab_phases_open", default=0)


def channel() -> str | None:
    """The file phases are reported to in this process (None: nobody watches)."""
    return os.environ.get(ENV) or None


def _append(path: str, record: dict[str, object]) -> None:
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:  # the watcher went away (its folder removed): reporting is best effort, the work goes on
        pass


def bind(folder: str | Path | None) -> str | None:
    """Point this process (and the kernels it starts from now on) at ``folder/<pid>.jsonl``; returns that path.
    None leaves the environment as it is."""
    if not folder:
        return None
    path = str(Path(folder) / f"{os.getpid()}.jsonl")
    if os.environ.get(ENV) != path:
        Path(folder).mkdir(parents=True, exist_ok=True)
        os.environ[ENV] = path
    return path


def announce(index: int, label: str, strategy: str = "") -> None:
    """Say that this process now runs config ``index`` (``label``, ``strategy``): the phases that follow are its."""
    path = channel()
    if path:
        _append(path, {"config": int(index), "label": str(label), "strategy": str(strategy), "t": time.time()})


class PhaseReporter:
    """Reports one phase of ``total`` items to the channel: :meth:`update` after each step, :meth:`close` at the
    end. Does nothing when no channel is set, the phase is smaller than :data:`MIN_ITEMS` or it runs inside
    another reported phase."""

    def __init__(self, phase: str, total: int | None, unit: str = "item", detail: str = ""):
        self.path = channel()
        if (total is not None and total < MIN_ITEMS) or _OPEN.get():
            self.path = None
        if self.path:
            _OPEN.set(_OPEN.get() + 1)
        self.phase, self.total, self.unit, self.detail = phase, total, unit, detail
        self.done, self.t0, self.last = 0, time.perf_counter(), 0.0
        self.closed = False
        self._write(end=False)

    def _write(self, end: bool) -> None:
        if not self.path:
            return
        now = time.perf_counter()
        self.last = now
        rec = {"phase": self.phase, "detail": self.detail, "done": self.done, "total": self.total, "unit": self.unit,
               "elapsed": round(now - self.t0, 3), "t": time.time()}
        if end:
            rec["end"] = True
        _append(self.path, rec)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.path and time.perf_counter() - self.last >= MIN_INTERVAL:
            self._write(end=False)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._write(end=True)
            if self.path:
                _OPEN.set(max(0, _OPEN.get() - 1))


def plural(unit: str, n: int | None = None) -> str:
    """``passage`` -> ``passages``, ``query`` -> ``queries`` (unchanged for ``n == 1``)."""
    if n == 1 or not unit:
        return unit
    if unit.endswith("y") and unit[-2:-1] not in "aeiou":
        return unit[:-1] + "ies"
    return unit if unit.endswith("s") else unit + "s"


def left(seconds: float) -> str:
    """A remaining time in words: ``12 s left``, ``1 min left``, ``1 h 5 min left``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s left"
    m = int(round(s / 60))
    return f"{m} min left" if m < 60 else f"{m // 60} h {m % 60} min left"


@dataclass
class PhaseEvent:
    """One phase event as read back (see the module docstring)."""

    phase: str
    done: int = 0
    total: int | None = None
    unit: str = "item"
    detail: str = ""
    elapsed: float = 0.0
    end: bool = False

    @property
    def seconds_left(self) -> float | None:
        """Time left at the rate so far (None before the first items, without a total, or at the end)."""
        if self.end or not self.total or self.done <= 0 or self.elapsed <= 0:
            return None
        return (self.total - self.done) * self.elapsed / self.done

    def describe(self, counts: bool = True) -> str:
        """``encoding 3,400/5,183 passages · 1 min left``; ``counts=False``: ``encoding 5,183 passages``."""
        if not counts:
            n = self.total if self.total is not None else self.done
            return f"{self.phase} {n:,} {plural(self.unit, n)}"
        if self.total is None:
            return f"{self.phase} {self.done:,} {plural(self.unit, self.done)}"
        text = f"{self.phase} {self.done:,}/{self.total:,} {plural(self.unit, self.total)}"
        rest = self.seconds_left
        return text + (f" · {left(rest)}" if rest is not None else "")


@dataclass
class ConfigStart:
    """A config started in the process that writes the file (:func:`announce`)."""

    index: int
    label: str
    strategy: str = ""


def parse(line: str) -> PhaseEvent | ConfigStart | None:
    """One line of a channel file, or None when it is not an event (a torn or foreign line)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    try:
        if "config" in rec:
            return ConfigStart(int(rec["config"]), str(rec.get("label", "")), str(rec.get("strategy", "")))
        if isinstance(rec.get("phase"), str):
            total = rec.get("total")
            return PhaseEvent(rec["phase"], int(rec.get("done", 0)), None if total is None else int(total),
                              str(rec.get("unit", "item")), str(rec.get("detail", "")),
                              float(rec.get("elapsed", 0.0)), bool(rec.get("end", False)))
    except (TypeError, ValueError):
        return None
    return None


class PhaseTail:
    """Reads the events appended to the channel files of a folder since the last :meth:`poll` (every
    ``*.jsonl`` in it: one per process that runs configs). Only whole lines are read; a partial last line waits
    for the next poll."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.offsets: dict[Path, int] = {}

    def poll(self) -> list[tuple[str, PhaseEvent | ConfigStart]]:
        """``(file name, event)`` pairs in the order each file holds them."""
        out: list[tuple[str, PhaseEvent | ConfigStart]] = []
        for path in sorted(self.folder.glob("*.jsonl")):
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(start)
                    data = fh.read(1 << 20)
            except OSError:
                continue
            cut = data.rfind(b"\n")
            if cut < 0:
                continue
            self.offsets[path] = start + cut + 1
            for raw in data[:cut].split(b"\n"):
                ev = parse(raw.decode("utf-8", "replace"))
                if ev is not None:
                    out.append((path.name, ev))
        return out
