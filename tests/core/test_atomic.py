"""lab.core.atomic: a reader sees the old file or the whole new one, never a 0-byte or half file."""
from __future__ import annotations

import pytest

from lab.core.atomic import atomic_path, write_text_atomic


def test_atomic_writes_leave_the_old_file_or_the_new_one(tmp_path):
    target = tmp_path / "result.json"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("serialising failed")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["result.json"]
