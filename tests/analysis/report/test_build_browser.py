"""The report opens in a real headless Chromium (Debian package `chromium`) offline: every section renders, every
image decodes with a non-zero natural size, nothing is fetched from outside the file, no console error.

A small check script is inserted at the top of a copy of the report; it records errors (script errors, failed
resources, console.error) from the start, and after the load event writes what it saw into <pre id="render-check">,
which `--dump-dom` returns. A negative control (a broken image and a script error) proves the check can fail.
The window is 1280 px wide: the leaderboard table (three metrics, sweep-like labels) must fit its container there
(scrollWidth <= the container's width: no horizontal scrolling). Without Chromium the tests skip locally and FAIL
under CI=true (install it: `apt-get install -y chromium`).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess

import pytest

from lab.analysis.report import SECTION_IDS

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=10000", "--window-size=1280,900")
CHECK = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push(e.message ? String(e.message)
    : 'resource failed: '
      + (e.target && (e.target.tagName + ' ' + String(e.target.src || e.target.href || '').slice(0, 60))));
}, true);
var __ce = console.error;
console.error = function () {
  window.__errors.push(Array.prototype.join.call(arguments, ' ')); __ce.apply(console, arguments); };
window.addEventListener('load', function () {
  // synchronous, inside the load handler, so --dump-dom (taken after load) always sees the result
  var imgs = Array.prototype.slice.call(document.images);
  var out = {
    sections: Array.prototype.map.call(document.querySelectorAll('section[id]'), function (s) {
      var r = s.getBoundingClientRect(); return {id: s.id, height: r.height, width: r.width}; }),
    images: imgs.map(function (i) {
      return {w: i.naturalWidth, h: i.naturalHeight, shown_w: i.width, complete: i.complete}; }),
    resources: performance.getEntriesByType('resource').map(function (e) { return e.name.slice(0, 60); }),
    viewport: window.innerWidth,
    tables: Array.prototype.map.call(document.querySelectorAll('table.leaderboard'), function (t) {
      return {scroll_w: t.scrollWidth, container_w: t.parentElement.clientWidth}; }),
    errors: window.__errors
  };
  var pre = document.createElement('pre'); pre.id = 'render-check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def browser() -> str:
    """The Chromium binary; skip (locally) or fail (CI=true) when there is none."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    msg = ("no Chromium on PATH (looked for " + ", ".join(BROWSERS) + "); install it with "
           "`apt-get install -y chromium` (Debian) to run the browser check of lab report")
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(msg + " -- CI=true, so this is a failure, not a skip")
    pytest.skip(msg)


def render(html_path, tmp_path) -> tuple[dict, list[str]]:
    """Open ``html_path`` (with CHECK inserted) in headless Chromium; the check's JSON and the console lines."""
    exe = browser()
    text = html_path.read_text(encoding="utf-8")
    head = re.search(r"<head[^>]*>", text)
    assert head, "no <head> in the page"
    page = tmp_path / ("checked-" + html_path.name)
    page.write_text(text[: head.end()] + CHECK + text[head.end():], encoding="utf-8")
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                          check=False, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="render-check">(.*?)</pre>', proc.stdout, re.DOTALL)
    assert m, "the check script wrote no result: " + proc.stderr[-2000:]
    import html as _html

    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return json.loads(_html.unescape(m.group(1))), console


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from lab.cli.main import main
    from lab.core.paths import resolve_repo_path

    browser()  # skip (or fail under CI) before building anything
    d = tmp_path_factory.mktemp("browser")
    ds = resolve_repo_path("data/ord-qa")
    for label, extra in (("bm25", []), ("bm25-k1-0.1", ["--set", "k1=0.1"])):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert main(["run", "--dataset", str(ds), "--strategy", "bm25", *extra, "--json", "--no-progress",
                         "--per-query", str(d / f"{label}.per_query.csv"), "--out", str(d / f"{label}.trec")]) == 0
        (d / f"{label}.json").write_text(out.getvalue())
    from lab.analysis.report import report_files

    res = report_files(sorted(d.glob("bm25*")), out=d / "report.html", metrics=["ndcg@10", "recall@100"],
                       n_resamples=1000, n_worst=5)
    return res.path


def test_report_renders_every_section_in_chromium(report, tmp_path):
    seen, console = render(report, tmp_path)
    assert seen["errors"] == [] and console == []
    ids = [s["id"] for s in seen["sections"]]
    assert ids == list(SECTION_IDS)
    assert all(s["height"] > 20 and s["width"] > 200 for s in seen["sections"]), seen["sections"]
    # 2 metrics: a bar chart and a distribution each, plus the quality-vs-latency scatter
    assert len(seen["images"]) == 5
    for img in seen["images"]:
        assert img["complete"] and img["w"] > 100 and img["h"] > 100 and img["shown_w"] > 0, img
    assert all(r.startswith(("data:", "file:")) for r in seen["resources"]), seen["resources"]


def test_the_check_catches_a_broken_page(tmp_path):
    """Negative control: an undecodable image and a script error are reported, so the test above can fail."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><section id="a"><h2>A</h2>'
                    '<img src="data:image/png;base64,AAAA" alt="broken"></section>'
                    "<script>undefinedFunction();</script></body></html>", encoding="utf-8")
    seen, console = render(page, tmp_path)
    assert any("undefinedFunction" in e for e in seen["errors"])
    assert any("resource failed" in e for e in seen["errors"])
    assert [(i["w"], i["h"]) for i in seen["images"]] == [(0, 0)]
    assert any("Uncaught" in line for line in console)


def test_leaderboard_fits_the_page_at_1280_px(tmp_path):
    """Three metrics (22 columns) and sweep-style labels: at a 1280 px window the leaderboard table is no wider than
    its container; a negative control (the same table with its cells forced onto one line) does not fit."""
    from lab.analysis.report import build_report

    from .test_build import sweep_like_runs

    browser()
    path = build_report(sweep_like_runs(), tmp_path / "wide.html", n_resamples=200, n_worst=2).path
    seen, console = render(path, tmp_path)
    assert seen["errors"] == [] and console == []
    assert seen["viewport"] == 1280 and len(seen["tables"]) == 1, seen
    table = seen["tables"][0]
    assert 0 < table["scroll_w"] <= table["container_w"], table
    forced = tmp_path / "forced.html"
    forced.write_text(path.read_text(encoding="utf-8").replace(
        "</style>", "table.leaderboard td,table.leaderboard th{white-space:nowrap;font-size:1.2em}</style>"),
        encoding="utf-8")
    seen, _ = render(forced, tmp_path)
    assert seen["tables"][0]["scroll_w"] > seen["tables"][0]["container_w"], seen["tables"]
