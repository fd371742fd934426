"""Progress bars: tqdm on anything that may take more than a few seconds; silent when disabled."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def progress(iterable: Iterable[T], desc: str = "", total: int | None = None, enabled: bool = True,
             **kw: Any) -> Iterable[T]:
    if not enabled or os.environ.get("LAB_NO_PROGRESS"):
        return iterable
    from tqdm.auto import tqdm

    bar: Iterable[T] = tqdm(iterable, desc=desc, total=total, file=sys.stderr, dynamic_ncols=True,
                            mininterval=1.0, **kw)
    return bar
