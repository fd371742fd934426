"""A sweep that says what it is doing: the phases its configs report (:mod:`lab.core.phases`), shown while they run.

:func:`watch_phases` makes a folder for the channel files, points this process at it (kernels started from now on
inherit it; pool and Ray workers point themselves at it with :func:`lab.core.phases.bind` before they start a
kernel), and polls it twice a second on a thread:

- with a bar (``lines=False``), the bar's description shows the latest phase of a running config:
  ``sweep smoke: dense · encoding 3,400/5,183 passages · 1 min left``;
- without one (``--no-progress``, or output that is not a terminal), ``echo`` gets one line per phase as it
  starts: ``config 1 (dense): dense · encoding 5,183 passages``.

Ray workers on another machine write to a folder this process cannot read: their configs run silent, as before.
The folder is removed when the watch ends; the environment variable is restored.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from lab.core import phases
from lab.core.phases import ConfigStart, PhaseEvent, PhaseTail

#: Seconds between two reads of the channel files.
POLL_SECONDS = 0.5


@dataclass
class PhaseWatch:
    """The state of one watch: the channel folder, where the text goes, and what each writer runs now."""

    folder: str
    name: str
    lines: bool
    echo: Callable[..., object] | None
    bar: object | None = None
    running: dict[str, ConfigStart] = field(default_factory=dict)  # channel file -> the config it runs now
    shown: list[str] = field(default_factory=list)  # every line echoed (lines mode), in order

    def __post_init__(self) -> None:
        self.tail = PhaseTail(self.folder)
        self.lock = threading.Lock()

    def poll(self) -> None:
        """Read what the writers appended since the last poll and show it."""
        with self.lock:
            for source, ev in self.tail.poll():
                if isinstance(ev, ConfigStart):
                    self.running[source] = ev
                else:
                    self._show(self.running.get(source), ev)

    def _show(self, cfg: ConfigStart | None, ev: PhaseEvent) -> None:
        who = f"{cfg.strategy} · " if cfg and cfg.strategy else ""
        if self.lines:
            if ev.done == 0 and not ev.end and self.echo is not None:  # a phase starts: one line
                line = (f"config {cfg.index} ({cfg.label}): " if cfg else "") + who + ev.describe(counts=False)
                self.shown.append(line)
                self.echo(line)
            return
        setter = getattr(self.bar, "set_description_str", None)
        if setter is not None:
            text = f"{who}{ev.describe()}" if not ev.end else f"{who}{ev.phase} done"
            setter(f"sweep {self.name}: {text}", refresh=True)


@contextlib.contextmanager
def watch_phases(name: str, lines: bool, echo: Callable[..., object] | None) -> Iterator[PhaseWatch]:
    """Watch the phases of a sweep's configs while the block runs (see the module docstring); the yielded
    :class:`PhaseWatch` has ``folder`` (give it to the tasks) and ``bar`` (set it to the sweep's bar)."""
    folder = tempfile.mkdtemp(prefix="lab-phases-")
    before = os.environ.get(phases.ENV)
    phases.bind(folder)
    watch = PhaseWatch(folder, name, lines, echo)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(POLL_SECONDS):
            watch.poll()

    thread = threading.Thread(target=loop, daemon=True, name="lab-phase-watch")
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join()
        watch.bar = None  # the bar is closed by now: the last lines only
        watch.poll()  # what was written since the last poll
        if before is None:
            os.environ.pop(phases.ENV, None)
        else:
            os.environ[phases.ENV] = before
        shutil.rmtree(folder, ignore_errors=True)
