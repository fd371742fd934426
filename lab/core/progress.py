"""Progress bars: tqdm on anything that may take more than a few seconds; silent when disabled.

Whatever the bar does, a phase (the bar's ``phase``, else its ``desc``) is also reported to the phase channel when
one is set (:mod:`lab.core.phases`: a sweep watching this process from another), so a config running in a kernel
or a worker can say "encoding 3,400/5,183 passages" to the sweep that started it."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sized
from typing import Any, TypeVar

from tqdm.auto import tqdm

from lab.core.phases import PhaseReporter, channel

T = TypeVar("T")
S = TypeVar("S", bound=Sized)


def _reported(iterable: Iterable[T], phase: str, total: int | None, unit: str, detail: str,
              sizes: bool = False) -> Iterator[T]:
    """``iterable`` with each step (each item's ``len`` when ``sizes``) reported to the phase channel."""
    rep = PhaseReporter(phase, total, unit=unit, detail=detail)
    try:
        for x in iterable:
            yield x
            rep.update(len(x) if sizes else 1)  # type: ignore[arg-type]
    finally:
        rep.close()


def progress(iterable: Iterable[T], desc: str = "", total: int | None = None, enabled: bool = True,
             phase: str = "", **kw: Any) -> Iterable[T]:
    if total is None and isinstance(iterable, Sized):
        total = len(iterable)
    if channel():
        iterable = _reported(iterable, phase or desc, total, kw.get("unit", "item"), desc if phase else "")
    if not enabled or os.environ.get("LAB_NO_PROGRESS"):
        return iterable

    bar: Iterable[T] = tqdm(iterable, desc=desc, total=total, file=sys.stderr, dynamic_ncols=True, mininterval=1.0,
                            **kw)
    return bar


def progress_items(batches: Iterable[S], desc: str = "", total: int | None = None, enabled: bool = True,
                   unit: str = "item", phase: str = "") -> Iterator[S]:
    """Iterate ``batches`` (each sized) with a bar that counts their items, not the batches, so its rate reads
    in ``unit``/s (passages/s while a dense retriever encodes) and its total is the number of items. ``phase``
    names what the phase channel reports ("encoding"; default ``desc``)."""
    if channel():
        batches = _reported(batches, phase or desc, total, unit, desc if phase else "", sizes=True)
    if not enabled or os.environ.get("LAB_NO_PROGRESS"):
        yield from batches
        return

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, mininterval=1.0) as bar:
        for b in batches:
            yield b
            bar.update(len(b))
