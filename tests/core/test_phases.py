"""lab.core.phases: the phase channel a config's process reports to, read back as the sweep reads it."""
from __future__ import annotations

import json

import pytest

from lab.core import phases
from lab.core.phases import ConfigStart, PhaseEvent, PhaseTail, left, parse, plural
from lab.core.progress import progress, progress_items


@pytest.fixture
def channel(tmp_path, monkeypatch):
    path = tmp_path / "w.jsonl"
    monkeypatch.setenv(phases.ENV, str(path))
    return path


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_bar_reports_its_phase_start_and_end_with_item_counts(channel):
    batches = [list(range(40)), list(range(30))]
    assert [len(b) for b in progress_items(batches, desc="encode m", total=70, enabled=False, unit="passage",
                                           phase="encoding")] == [40, 30]
    recs = records(channel)
    assert recs[0]["phase"] == "encoding" and recs[0]["done"] == 0 and recs[0]["total"] == 70
    assert recs[-1]["end"] is True and recs[-1]["done"] == 70 and recs[-1]["unit"] == "passage"
    assert recs[0]["detail"] == "encode m"


def test_small_and_nested_phases_are_not_reported(channel):
    list(progress(range(5), desc="tiny", enabled=False))
    assert not channel.exists()
    for _ in progress_items([list(range(50))], total=50, enabled=False, unit="passage", phase="encoding"):
        list(progress_items([list(range(40))], total=40, enabled=False, phase="inner"))
    assert {r["phase"] for r in records(channel)} == {"encoding"}
    list(progress(range(40), desc="search x", enabled=False, phase="searching", unit="query"))  # not nested now
    assert records(channel)[-1]["phase"] == "searching"


def test_no_channel_no_file(tmp_path, monkeypatch):
    monkeypatch.delenv(phases.ENV, raising=False)
    assert list(progress(range(100), enabled=False)) == list(range(100))
    assert list(tmp_path.iterdir()) == []


def test_describe_counts_rate_and_time_left():
    ev = PhaseEvent("encoding", done=3400, total=5183, unit="passage", elapsed=120.0)
    assert ev.describe() == "encoding 3,400/5,183 passages · 1 min left"
    assert ev.describe(counts=False) == "encoding 5,183 passages"
    assert PhaseEvent("searching", 0, 300, "query").describe() == "searching 0/300 queries"
    assert plural("query", 1) == "query" and left(12.4) == "12 s left" and left(3900) == "1 h 5 min left"


def test_tail_reads_whole_lines_only_and_skips_torn_ones(tmp_path):
    f = tmp_path / "1.jsonl"
    f.write_text('{"config": 2, "label": "dense", "strategy": "dense"}\n{"phase": "encoding", "done": 0, "tot')
    tail = PhaseTail(tmp_path)
    assert tail.poll() == [("1.jsonl", ConfigStart(2, "dense", "dense"))]
    with open(f, "a") as fh:
        fh.write('al": 9}\nnot json\n[1]\n')
    (ev,) = [e for _, e in tail.poll()]
    assert ev == PhaseEvent("encoding", 0, 9)
    assert tail.poll() == []
    assert parse('{"phase": "x", "done": "many"}') is None
