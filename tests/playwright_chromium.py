"""Helpers of the browser tests: Playwright for Python driving the Debian Chromium by its path, local servers.

Playwright's own browser download is not reachable here, so the tests never run ``playwright install``; they
launch ``/usr/bin/chromium`` (``make browser`` installs it) through ``executable_path``. Without Chromium or
Playwright the tests skip locally and FAIL under CI=true.

Screenshots go to the test's tmp folder and, when RAGLAB_SCREENSHOTS_DIR is set (e.g. ``docs/img``), are copied
there too: that is how the README's screenshots are made.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
SCREENSHOTS_ENV = "RAGLAB_SCREENSHOTS_DIR"


def _missing(msg: str):
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(msg + " -- CI=true, so this is a failure, not a skip")
    pytest.skip(msg)


@contextlib.contextmanager
def chromium(viewport=(1400, 900)):
    """A Playwright page in the Debian Chromium (headless); console errors collected in ``page.errors``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (it is pinned in requirements-test.txt: `make setup`)")
    exe = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if exe is None:
        _missing("no Chromium on PATH; install it with `make browser` (apt-get install -y chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            page.errors = []
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            yield page
        finally:
            browser.close()


def screenshot(page, tmp_path: Path, name: str) -> Path:
    """Save a PNG of the page as a test artifact (and into $RAGLAB_SCREENSHOTS_DIR when set)."""
    path = tmp_path / name
    page.screenshot(path=str(path))
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        folder = Path(target)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / name)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, timeout: float, data: dict | None = None) -> None:
    """Poll ``url`` (POST of ``data`` as JSON when given) until it answers 200; fail if ``proc`` exits first."""
    deadline = time.time() + timeout
    while True:
        try:
            body = json.dumps(data).encode() if data is not None else None
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert proc.poll() is None, f"the server exited with {proc.returncode} before answering {url}"
        assert time.time() < deadline, f"no answer from {url} within {timeout:.0f} s"
        time.sleep(0.5)


@contextlib.contextmanager
def server(cmd: list[str], env: dict, log: Path):
    """Run ``cmd`` in its own process group (output to ``log``); ended with SIGTERM, then SIGKILL."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=30)
