"""lab.core.atomic: a reader sees the old file or the whole new one, never a 0-byte or half file."""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import pytest

from lab.core.atomic import atomic_path, open_atomic, write_bytes_atomic, write_text_atomic


def test_atomic_writes_leave_the_old_file_or_the_new_one(tmp_path):
    target = tmp_path / "result.json"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("serialising failed")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_write_text_atomic_creates_parents_writes_0644_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "a" / "b" / "out.txt"
    assert write_text_atomic(target, "é\n") == target
    assert target.read_bytes() == "é\n".encode("utf-8")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]


def test_the_temporary_is_beside_the_target_and_hidden(tmp_path):
    with atomic_path(tmp_path / "x.json") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".x.json.") and tmp.suffix == ".tmp"
        tmp.write_text("new")
    assert (tmp_path / "x.json").read_text() == "new" and not tmp.exists()


def test_an_os_error_that_names_no_file_is_raised_again_naming_the_target(tmp_path):
    target = tmp_path / "result.json"
    with pytest.raises(OSError) as exc:
        with atomic_path(target):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []


def test_an_os_error_naming_a_file_propagates_as_it_is(tmp_path):
    with pytest.raises(PermissionError) as exc:
        with atomic_path(tmp_path / "out"):
            raise PermissionError(errno.EACCES, "Permission denied", "/elsewhere")
    assert exc.value.filename == "/elsewhere" and list(tmp_path.iterdir()) == []


def test_open_atomic_and_write_bytes_atomic_leave_the_target_or_nothing(tmp_path):
    target = tmp_path / "set.jsonl"
    with open_atomic(target) as fh:
        fh.write("a\n")
    assert target.read_text() == "a\n"
    with pytest.raises(ValueError):
        with open_atomic(target) as fh:
            fh.write("half")
            raise ValueError("a record could not be serialised")
    assert target.read_text() == "a\n" and [p.name for p in tmp_path.iterdir()] == ["set.jsonl"]
    assert write_bytes_atomic(tmp_path / "blob", b"\x00\x01", prefix=".ab.") == tmp_path / "blob"
    assert (tmp_path / "blob").read_bytes() == b"\x00\x01" and len(list(tmp_path.iterdir())) == 2


def test_no_write_then_rename_outside_the_atomic_writer():
    """Every file written by rename goes through lab.core.atomic (folders moved into place are not files)."""
    lab = Path(__file__).resolve().parents[2] / "lab"
    found = [f"{p.relative_to(lab)}:{n}" for p in sorted(lab.rglob("*.py")) if p.name != "atomic.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"os\.replace\(|\.replace\(tmp|\.tmp\b[\"']|with_suffix\(.*\.tmp", line)]
    assert found == [], found


def test_atomic_folder_appears_whole_or_not_at_all(tmp_path):
    from lab.core.atomic import atomic_folder

    target = tmp_path / "models" / "graph"
    with pytest.raises(RuntimeError):
        with atomic_folder(target) as out:
            (out / "model.xml").write_text("half")
            raise RuntimeError("quantisation failed")
    assert not target.exists() and list((tmp_path / "models").iterdir()) == []
    with atomic_folder(target) as out:
        (out / "model.xml").write_text("mine")
    assert (target / "model.xml").read_text() == "mine"
    with atomic_folder(target) as out:  # another process made it meanwhile: the first one stays
        (out / "model.xml").write_text("theirs")
    assert (target / "model.xml").read_text() == "mine" and sorted(p.name for p in target.parent.iterdir()) == ["graph"]
