"""Progress bars: tqdm on anything that may take more than a few seconds; silent when disabled."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sized
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
S = TypeVar("S", bound=Sized)


def progress(iterable: Iterable[T], desc: str = "", total: int | None = None, enabled: bool = True,
             **kw: Any) -> Iterable[T]:
    if not enabled or os.environ.get("LAB_NO_PROGRESS"):
        return iterable

    bar: Iterable[T] = tqdm(iterable, desc=desc, total=total, file=sys.stderr, dynamic_ncols=True, mininterval=1.0,
                            **kw)
    return bar


def progress_items(batches: Iterable[S], desc: str = "", total: int | None = None, enabled: bool = True,
                   unit: str = "item") -> Iterator[S]:
    """Iterate ``batches`` (each sized) with a bar that counts their items, not the batches, so its rate reads
    in ``unit``/s (passages/s while a dense retriever encodes) and its total is the number of items."""
    if not enabled or os.environ.get("LAB_NO_PROGRESS"):
        yield from batches
        return

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, mininterval=1.0) as bar:
        for b in batches:
            yield b
            bar.update(len(b))
