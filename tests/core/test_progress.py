"""lab.core.progress: the item-counting bar a dense encode shows (passages/s, not batches/s)."""
from __future__ import annotations

from lab.core.progress import progress_items


def test_progress_items_counts_items_and_yields_the_batches(capsys, monkeypatch):
    monkeypatch.delenv("LAB_NO_PROGRESS", raising=False)
    batches = [[1, 2], [3, 4, 5]]
    assert list(progress_items(batches, desc="encode m", total=5, unit="passage")) == batches
    err = capsys.readouterr().err
    assert "encode m" in err and "5/5" in err and "passage/s" in err
    assert list(progress_items(batches, total=5, enabled=False)) == batches and not capsys.readouterr().err
