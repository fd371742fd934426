"""lab.testset.human_sample: the queries people grade are a seeded uniform sample, and a pilot's grades are checked
before they decide how many more to draw."""
from __future__ import annotations

from collections import Counter

import pytest

from lab.core.errors import ConfigError, DataError
from lab.testset.human_sample import read_pilot, uniform_sample

QUERIES = [f"q{i:03d}" for i in range(200)]


def test_the_sample_is_seeded_sorted_without_repeats_and_ignores_input_order():
    a = uniform_sample(QUERIES, 30, seed=7)
    assert a == uniform_sample(list(reversed(QUERIES)), 30, seed=7)  # the same draw whatever the order given
    assert a == sorted(a) and len(set(a)) == 30 and set(a) <= set(QUERIES)
    assert a != uniform_sample(QUERIES, 30, seed=8)


def test_every_query_is_equally_likely_to_be_drawn():
    """Over 2,000 seeds each query is drawn about n/N of the time: no query is favoured (a hand-picked sample
    would break the prediction-powered estimate's promise)."""
    counts = Counter(q for seed in range(2000) for q in uniform_sample(QUERIES[:20], 5, seed))
    assert set(counts) == set(QUERIES[:20])
    assert all(abs(c / 2000 - 5 / 20) < 0.05 for c in counts.values())


def _pilot(path, rows):
    path.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rows))
    return path


def test_a_pilot_needs_ten_queries_of_the_split_graded_0_to_3(tmp_path):
    good = _pilot(tmp_path / "good.tsv", [(q, "d1", 1) for q in QUERIES[:10]])
    assert set(read_pilot(good, QUERIES)) == set(QUERIES[:10])
    with pytest.raises(ConfigError, match="9 human-graded queries; at least 10"):
        read_pilot(_pilot(tmp_path / "few.tsv", [(q, "d1", 1) for q in QUERIES[:9]]), QUERIES)
    with pytest.raises(DataError, match="grade 4 is outside 0-3"):
        read_pilot(_pilot(tmp_path / "grade.tsv", [(q, "d1", 4) for q in QUERIES[:10]]), QUERIES)
    with pytest.raises(DataError, match="query 'nope' is not a query of the split"):
        read_pilot(_pilot(tmp_path / "qid.tsv", [("nope", "d1", 1)] + [(q, "d1", 1) for q in QUERIES[:10]]), QUERIES)
