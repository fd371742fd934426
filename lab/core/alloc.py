"""Building many objects at once: the cyclic garbage collector paused while they are made.

CPython's cyclic collector runs every few hundred allocations of container objects, and each run of an older
generation walks every object that survived before. Building a few hundred thousand small acyclic objects (a
chunking's ``Chunk`` and ``Document`` objects, their metadata dicts) while a sweep's dataset and memos are alive
triggers collections that walk that whole heap again and again: on the chunk-size grid (20 configs, 298,484
chunks) about 1.7 s of a 12 s grid went to the collector (docs/results.md, "Successive halving and grids at the
speed of their index"). Reference counting still frees every object as usual while the collector is paused; only
reference cycles made meanwhile wait for the next collection after it resumes.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (nested blocks too), then restore its state: for code that
    builds many acyclic objects and keeps them (see the module docstring)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
