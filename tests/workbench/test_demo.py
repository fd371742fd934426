"""lab.workbench.demo: the demo's charts and CSV from a leaderboard, and what DemoResult reports (the sweep's
leaderboard: tests/analysis/test_leaderboard.py; the UI hint: tests/tracking/test_ui.py; all of it: `make demo`)."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from lab.workbench.demo import DemoResult, write_charts

PNG = b"\x89PNG\r\n\x1a\n"


def _leaderboard() -> pd.DataFrame:
    """Three rows shaped as lab.analysis.compare.experiment_leaderboard gives them (the best first)."""
    return pd.DataFrame({
        "label": ["strategy=rerank", "strategy=hybrid", "strategy=bm25"],
        "ndcg@10": [0.7255, 0.7151, 0.6804], "ndcg@10_ci_low": [0.679, 0.670, 0.636],
        "ndcg@10_ci_high": [0.765, 0.756, 0.723], "latency_p50_ms": [24.5, 32.8, 0.11],
        "diff": [0.0, -0.0105, -0.0451], "p_value": [float("nan"), 0.246, 0.0001],
        "p_adjusted": [float("nan"), 0.246, 0.0004], "significant": [False, False, True],
        "wins": [0, 41, 8], "ties": [300, 224, 229], "losses": [0, 35, 63]})


def test_write_charts_writes_two_pngs_and_the_csv_of_the_table(tmp_path):
    df = _leaderboard()
    files = write_charts(df, tmp_path / "out" / "demo", title="demo")
    assert set(files) == {"leaderboard", "quality_vs_latency", "csv"}
    assert files["leaderboard"].parent == tmp_path / "out" / "demo"
    for key in ("leaderboard", "quality_vs_latency"):
        assert files[key].read_bytes()[:8] == PNG and files[key].stat().st_size > 1000
    back = pd.read_csv(files["csv"])
    pd.testing.assert_frame_equal(back, df, check_dtype=False)


def test_demo_result_is_ok_when_the_sweep_is():
    assert DemoResult(SimpleNamespace(ok=True), _leaderboard()).ok is True
    result = DemoResult(SimpleNamespace(ok=0), pd.DataFrame())
    assert result.ok is False and result.files == {} and result.ui_command == ""
