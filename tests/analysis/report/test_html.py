"""lab.analysis.report.html: chart labels that fit, text from data escaped, the trust block with its PPI table."""
from __future__ import annotations

from lab.analysis.report import chart_label, esc, render_trust


def test_chart_label_keeps_short_labels_and_cuts_long_ones_with_their_rank():
    assert chart_label("short", 3) == "short"
    long = chart_label("strategy=rerank, params.reranker=biencoder", 12)
    assert long.startswith("#12 strategy") and len(long) <= 24


def test_esc_escapes_markup_and_quotes():
    assert esc('<b a="1">&') == "&lt;b a=&quot;1&quot;&gt;&amp;"
    assert esc(None) == "None"


def test_render_trust_puts_warnings_apart_and_escapes_them():
    trust = {"n_queries": 12, "labels": {"source": "human"}, "warnings": ["only <12> queries"]}
    out = render_trust(trust, "ndcg@10")
    assert out.startswith('<div class="trust">') and "12 queries" in out
    assert '<ul class="notes"><li>warning: only &lt;12&gt; queries</li></ul>' in out
    assert render_trust(None, "ndcg@10") == ""
