"""lab.tracking.faults: the cause of a logging failure in plain words, from real errors; where unlogged results
go."""
from __future__ import annotations

import errno
import socket
import sqlite3
import urllib.request

import pytest

from lab.core.errors import TrackingError
from lab.tracking.faults import UNLOGGED_ENV, check_server, plain_cause, unlogged_root


def test_a_read_only_store_and_a_full_disk_are_named_in_plain_words(tmp_path):
    db = tmp_path / "mlflow.db"
    sqlite3.connect(db).execute("CREATE TABLE runs (id TEXT)").connection.commit()
    ro = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as exc:
        ro.execute("INSERT INTO runs VALUES ('a')")
    wrapped = RuntimeError("(raised as a result of Query-invoked autoflush; consider using a session.no_autoflush)")
    wrapped.__cause__ = exc.value
    assert plain_cause(wrapped) == "the store is read-only"
    assert plain_cause(OSError(errno.ENOSPC, "No space left on device")) == "the disk holding the store is full"
    assert plain_cause(ValueError("odd")) == "ValueError: odd"


def test_a_server_that_does_not_answer_is_named_and_stops_a_sweep(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(OSError) as exc:
        urllib.request.urlopen(url, timeout=5)
    assert plain_cause(exc.value, url) == f"the tracking server {url} does not answer"
    with pytest.raises(TrackingError, match=f"the tracking server {url} does not answer \\(while running config 1"):
        check_server(url, "running config 1 (k1=0.9)")
    check_server(tmp_path / "mlruns", "anything")  # a folder store: nothing to check


def test_unlogged_results_go_beside_the_store_or_where_the_user_said(tmp_path, monkeypatch):
    monkeypatch.delenv(UNLOGGED_ENV, raising=False)
    assert unlogged_root(tmp_path / "mlruns") == tmp_path / "mlruns" / "unlogged"
    assert unlogged_root(f"sqlite:///{tmp_path}/s/mlflow.db") == tmp_path / "s" / "unlogged"
    assert unlogged_root("http://127.0.0.1:5000").parts[-3:] == (".cache", "raglab", "unlogged")
    monkeypatch.setenv(UNLOGGED_ENV, str(tmp_path / "out" / "unlogged"))
    assert unlogged_root(tmp_path / "mlruns") == tmp_path / "out" / "unlogged"
