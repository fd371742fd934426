"""lab.testset.annotate on real ord-qa passages: pooled bm25 + dense candidates, deduplicated and shuffled per
query; graded judgements and tiers back as qrels and tiers.json that weighted_recall reads."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from ordqa_slices import mini_ordqa

from lab.core.errors import DataError
from lab.data.beir import load_dataset
from lab.metrics import evaluate
from lab.retrievers.base import Context, build
from lab.testset.annotate import ANNOTATION_COLUMNS, export_annotation, import_annotation, meta_path, shuffled
from lab.testset.io import read_tiers

REPO = Path(__file__).resolve().parents[2]




@pytest.fixture(scope="module")
def sheet(tmp_path_factory):
    base = tmp_path_factory.mktemp("annot")
    ds_dir = mini_ordqa(base / "mini")
    out = export_annotation(ds_dir, base / "sheet.csv", strategies=["bm25", "dense"], depth=5, seed=0,
                            cache_dir=base / "cache", progress=False, tracking_root=None)
    return base, ds_dir, out


def _rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def test_sheet_pools_deduplicates_and_hides_the_strategies(sheet):
    base, ds_dir, out = sheet
    rows = _rows(base / "sheet.csv")
    assert list(rows[0]) == list(ANNOTATION_COLUMNS) and (base / "sheet.csv").read_bytes()[:3] == b"\xef\xbb\xbf"
    meta = json.loads(meta_path(base / "sheet.csv").read_text(encoding="utf-8"))
    ds = load_dataset(ds_dir, progress=False)
    assert out["queries"] == len(ds.split("test")[1]) >= 5 and out["rows"] == len(rows)
    pairs = [(r["qid"], r["unit_id"]) for r in rows]
    assert len(pairs) == len(set(pairs))
    for q, pool in meta["pool"].items():
        units = [r["unit_id"] for r in rows if r["qid"] == q]
        assert units == shuffled(list(pool), 0, q) and 5 <= len(units) <= 10  # union of two top-5 lists
        assert all(set(found) <= {"bm25", "dense"} for found in pool.values())
        assert rows[[r["qid"] for r in rows].index(q)]["query"] == ds.queries[q]
    assert 0 < out["found_by_several_share"] < 1  # the strategies agree on some units, not all


def test_shuffle_is_seeded_per_query():
    units = [f"u{i}" for i in range(10)]
    assert shuffled(units, 0, "q1") == shuffled(list(reversed(units)), 0, "q1")
    assert shuffled(units, 0, "q1") != shuffled(units, 1, "q1") and sorted(shuffled(units, 0, "q2")) == units


def _fill(src: Path, dst: Path, edit) -> Path:
    rows = _rows(src)
    for i, r in enumerate(rows):
        edit(i, r)
    with open(dst, "w", encoding="utf-8-sig", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(ANNOTATION_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    meta_path(dst).write_text(meta_path(src).read_text(encoding="utf-8"), encoding="utf-8")
    return dst


def test_grades_and_tiers_come_back_as_qrels_for_weighted_recall(sheet, tmp_path):
    base, ds_dir, _ = sheet
    rank_in_q: dict[str, int] = {}

    def judge(i, r):  # per query: first candidate core 3, second auxiliary 2, third edge 1, fourth 0, rest unjudged
        k = rank_in_q[r["qid"]] = rank_in_q.get(r["qid"], -1) + 1
        grades = {0: ("3", "core"), 1: ("2", "auxiliary"), 2: ("1", "Edge"), 3: ("0", "")}
        r["grade"], r["tier"] = grades.get(k, ("", ""))

    filled = _fill(base / "sheet.csv", tmp_path / "filled.csv", judge)
    rep = import_annotation(filled, tmp_path / "judged", tracking_root=None)
    nq = len(rank_in_q)
    assert rep["queries"] == nq and rep["judged"] == 4 * nq and rep["grades"] == {str(g): nq for g in range(4)}
    assert rep["tiers"] == {"core": nq, "auxiliary": nq, "edge": nq}
    assert rep["relevant_found_by_bm25"] + rep["relevant_found_only_by_dense"] >= 3 * nq
    ds = load_dataset(tmp_path / "judged", progress=False)
    tiers = read_tiers(tmp_path / "judged")
    q = next(iter(ds.qrels["test"].qrels))
    assert sorted(ds.qrels["test"][q].values()) == [0, 1, 2, 3] and sorted(tiers[q].values()) == ["auxiliary", "core",
                                                                                                  "edge"]
    bm25 = build("bm25", {}, Context(cache_dir=tmp_path / "c", progress=False))
    bm25.index(ds.corpus)
    run = bm25.search_batch(ds.split("test")[0], 10)
    ev = evaluate(ds.qrels["test"], run, ["recall@10"], tiers=tiers)
    assert "weighted_recall@10" in ev.means and 0 < ev.means["weighted_recall@10"] <= 1


@pytest.mark.parametrize("cells,field", [
    ({"grade": "0", "tier": "core"}, "tier"),
    ({"grade": "", "tier": "edge"}, "tier"),
    ({"grade": "2", "tier": "gold"}, "tier"),
    ({"grade": "4"}, "grade"),
    ({"grade": "1", "unit_id": "no_such_unit"}, "unit_id"),
])
def test_bad_rows_name_line_and_field(sheet, tmp_path, cells, field):
    base, _, _ = sheet
    filled = _fill(base / "sheet.csv", tmp_path / "bad.csv", lambda i, r: r.update(cells) if i == 1 else
                   r.update(grade="1") if i == 0 else None)
    with pytest.raises(DataError) as e:
        import_annotation(filled, tmp_path / "out", tracking_root=None)
    assert e.value.field == field and e.value.line >= 3 and not (tmp_path / "out").exists()
