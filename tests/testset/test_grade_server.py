"""`lab testset grade` in a real browser (Playwright driving the Debian Chromium): a sheet exported from data/ord-qa is
graded by keyboard, three rows; the server is killed (SIGKILL) and started again, and the page resumes at row 4 with
the three grades in the CSV. The page shows the query's terms marked, the progress and the scale, and nothing but
the token opens it. A review sheet (export-review of data/ord-qa) is graded with its own keys (skip, back, keep,
fix with the corrected question, a note, drop), and the arbitration page shows only the rows two graders graded
differently, with both grades. Screenshots go to the test's folder (docs/img/grading.png with
RAGLAB_SCREENSHOTS_DIR=docs/img).
"""
from __future__ import annotations

import contextlib
import csv
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright_chromium import chromium, screenshot, server

from lab.core.paths import resolve_repo_path
from lab.testset.annotate import export_annotation
from lab.testset.grade_server import start_server
from lab.testset.grading import open_grading
from lab.testset.spotcheck import export_review

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sheet(tmp_path_factory):
    base = tmp_path_factory.mktemp("grade-page")
    export_annotation(resolve_repo_path("data/ord-qa"), base / "sheet.csv", strategies=["bm25"], depth=4,
                      max_queries=5, seed=0, cache_dir=base / "cache", progress=False, tracking_root=None)
    return base / "sheet.csv"


def grades(path: Path) -> list[str]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return [r["grade"] for r in csv.DictReader(fh)]


def url_of(log: Path, proc, timeout: float = 60) -> str:
    """The URL the command printed (it prints it once the port is bound)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(r"http://127\.0\.0\.1:\d+/\?token=[\w-]+", log.read_text(errors="replace"))
        if m:
            return m.group()
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    raise AssertionError(f"no URL printed within {timeout} s: {log.read_text()}")


def at_row(page, n: int) -> None:
    """Wait until the page shows row ``n`` (a selector, not wait_for_function: the page's CSP refuses eval)."""
    page.wait_for_selector(f"#position:text-matches('^row {n} of ')", timeout=15_000)


def test_grade_three_rows_by_key_kill_the_server_and_resume_at_row_4(sheet, tmp_path):
    cmd = [sys.executable, "-m", "lab", "testset", "grade", str(sheet), "--no-browser"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    total = len(grades(sheet))
    with chromium(viewport=(1440, 900)) as page:
        with server(cmd, env, tmp_path / "first.log") as proc:
            url = url_of(tmp_path / "first.log", proc)
            with pytest.raises(urllib.error.HTTPError) as denied:  # the token is required
                urllib.request.urlopen(url.split("?")[0] + "api/status", timeout=10)
            assert denied.value.code == 403
            page.goto(url)
            at_row(page, 1)
            assert page.inner_text("#progress").startswith(f"0 / {total} graded")
            assert page.locator("#scale li").count() == 4 and "answers it fully" in page.inner_text("#scale")
            assert page.locator("#passage mark").count() > 0  # the query's terms are marked
            for row, key in enumerate("203", start=2):
                page.keyboard.press(key)
                at_row(page, row)
            assert grades(sheet)[:4] == ["2", "0", "3", ""]  # each grade was on disk before the page moved on
            page.keyboard.press("ArrowLeft")
            at_row(page, 3)
            assert "Graded: 3" in page.inner_text("#own")
            page.keyboard.press("ArrowRight")
            at_row(page, 4)
            os.killpg(proc.pid, signal.SIGKILL)  # no shutdown handler runs: only what was already written survives
            proc.wait(timeout=30)
        assert grades(sheet)[:4] == ["2", "0", "3", ""] and sum(bool(g) for g in grades(sheet)) == 3
        with server(cmd, env, tmp_path / "second.log") as proc:
            url = url_of(tmp_path / "second.log", proc)
            assert "3 of" in (tmp_path / "second.log").read_text()
            page.goto(url)
            at_row(page, 4)
            assert page.inner_text("#progress").startswith(f"3 / {total} graded")
            screenshot(page, tmp_path, "grading.png")
            page.keyboard.press("1")
            at_row(page, 5)
            page.keyboard.press("2")
            at_row(page, 6)
            assert "per hour" in page.inner_text("#progress") and "left" in page.inner_text("#progress")
        assert page.errors == []
    assert grades(sheet)[:6] == ["2", "0", "3", "1", "2", ""]


@contextlib.contextmanager
def serving(grading):
    """start_server on a free port, served from a thread for the duration of the block."""
    srv = start_server(grading)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.close()


def test_a_review_sheet_takes_keep_fix_drop_and_arbitration_shows_both_grades(sheet, tmp_path):
    review = tmp_path / "review.csv"
    export_review(resolve_repo_path("data/ord-qa"), review, sample=3, seed=0)
    with chromium() as page:
        with serving(open_grading(review)) as srv:
            page.goto(srv.url)
            at_row(page, 1)
            assert "keep" in page.inner_text("#scale") and page.text_content("#query-label") == "Question"
            page.keyboard.press("s")  # skip: on to row 2, row 1 left ungraded
            at_row(page, 2)
            assert page.inner_text("#own") == "Not graded yet"
            page.keyboard.press("ArrowLeft")
            at_row(page, 1)
            page.keyboard.press("k")
            at_row(page, 2)
            page.keyboard.press("f")
            screenshot(page, tmp_path, "grading-review.png")
            page.fill("#fix-input", "Which OpenROAD command sets the placement density?")
            page.keyboard.press("Enter")
            at_row(page, 3)
            page.keyboard.press("n")
            page.keyboard.type("asks two things at once")
            page.keyboard.press("Enter")
            page.wait_for_selector("#note-shown:text-matches('asks two things')")
            page.keyboard.press("d")
            page.wait_for_selector("#done.on")
        with open(review, encoding="utf-8-sig", newline="") as fh:
            got = [(r["verdict"], r["fixed_question"], r["note"]) for r in csv.DictReader(fh)]
        assert got == [("keep", "", ""), ("fix", "Which OpenROAD command sets the placement density?", ""),
                       ("drop", "", "asks two things at once")]

        copy = tmp_path / "pool.csv"
        copy.write_bytes(sheet.read_bytes())
        alice, bob = open_grading(copy, grader="alice"), open_grading(copy, grader="bob")
        for pos, (a, b) in enumerate(zip("3102", "3012", strict=True)):
            alice.grade(pos, a, now=float(pos))
            bob.grade(pos, b, now=float(pos))
        with serving(open_grading(copy, arbitrate=True)) as srv:
            page.goto(srv.url)
            at_row(page, 1)
            assert page.inner_text("#position") == "row 1 of 2"
            assert page.locator("#others .g").all_inner_texts() == ["alice: 1", "bob: 0"]
            screenshot(page, tmp_path, "grading-arbitrate.png")
            page.keyboard.press("1")
            at_row(page, 2)
            assert page.locator("#others .g").all_inner_texts() == ["alice: 0", "bob: 1"]
        assert page.errors == []
