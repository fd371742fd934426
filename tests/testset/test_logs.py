"""lab.testset.logs: the OpenROAD FAQ fixture linked to the real ord-qa units (reference, section, best match),
off-topic rows left unlinked and listed, bad rows naming file, line and field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.core.errors import DataError
from lab.data.beir import load_dataset
from lab.testset.logs import import_logs, read_log_rows

REPO = Path(__file__).resolve().parents[2]
FAQ = REPO / "tests" / "fixtures" / "testset" / "openroad_faq.csv"

# fixture line -> the ord-qa unit that answers it (checked by reading the corpus)
EXPECTED = {2: "install_0", 3: "get_start_4", 4: "global_routing_2", 5: "global_routing_11",
            6: "chip-level_connections_4", 7: "chip-level_connections_13", 8: "pin_placement_7", 9: "gate_resizing_1",
            10: "gate_resizing_10", 11: "gui_10", 12: "parasitics_extraction_4", 13: "unit_test_1", 14: "scripts_11",
            15: "flow-scripts-tutorial_25", 16: "flow-scripts-tutorial_52", 17: "flow-scripts-tutorial_43"}
OFF_TOPIC = {18, 19, 20}  # VPN password, conference refund, cafeteria hours


@pytest.fixture(scope="module")
def faq_import(tmp_path_factory):
    out = tmp_path_factory.mktemp("faq")
    rep = import_logs(FAQ, REPO / "data" / "ord-qa", out / "set", cache_dir=out / "cache", progress=False,
                      tracking_root=None)
    return rep, out / "set"


def test_faq_rows_link_to_the_units_that_answer_them(faq_import):
    rep, folder = faq_import
    links = {r["line"]: r for r in map(json.loads, (folder / "links.jsonl").read_text(encoding="utf-8").splitlines())}
    assert {line: links[line]["unit_id"] for line in EXPECTED} == EXPECTED
    assert links[2]["method"] == "reference"  # the reference names the unit
    assert links[5]["method"] == links[8]["method"] == "reference+match"  # a section: best unit inside it
    assert links[3]["method"] == "match"
    assert links[17]["method"] == "match" and "names no unit" in links[17]["note"]  # unknown URL: matched instead
    c = rep["counts"]
    assert (c["rows"], c["linked"], c["unlinked"], c["duplicates"], c["references_not_found"]) == (20, 16, 3, 1, 1)


def test_off_topic_rows_stay_unlinked_and_are_listed(faq_import):
    rep, folder = faq_import
    unlinked = {r["line"]: r for r in rep["unlinked"]}
    assert set(unlinked) == OFF_TOPIC | {21}
    assert unlinked[21]["method"] == "duplicate" and "line 3" in unlinked[21]["note"]
    for line in OFF_TOPIC:
        assert unlinked[line]["unit_id"] is None and unlinked[line]["score"] < rep["link_threshold"]
        assert unlinked[line]["best_candidate"]  # the best candidate is shown, for a person to decide
    saved = [json.loads(ln) for ln in (folder / "unlinked.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in saved] == sorted(unlinked)


def test_linked_rows_form_a_loadable_set(faq_import):
    _, folder = faq_import
    ds = load_dataset(folder, progress=False)
    queries, qrels = ds.split("test")
    assert len(qrels) == 16 and len(ds.corpus) == 290
    first = queries.metadata["log-0001"]
    assert first["source_line"] == 2 and first["link_method"] == "reference" and "git clone" in first["answer"]
    assert qrels["log-0001"] == {"install_0": 1}
    prov = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    assert prov["kind"] == "logs" and prov["report"]["linked"] == 16 and prov["linking"]["link_threshold"] == 0.5


def test_jsonl_logs_and_bad_rows(tmp_path):
    good = tmp_path / "tickets.jsonl"
    good.write_text('{"Query": "How do I zoom in the GUI?", "resolution": "gui::zoom_to", "ticket": 17}\n',
                    encoding="utf-8")
    (row,) = read_log_rows(good)
    assert (row.question, row.answer, row.extra) == ("How do I zoom in the GUI?", "gui::zoom_to", {"ticket": 17})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok?"}\n\n{"question": ["a", "list"]}\n', encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_log_rows(bad)
    assert (e.value.line, e.value.field) == (3, "question")
    empty = tmp_path / "faq.csv"
    empty.write_text("question,answer\nHow?,yes\n ,orphan answer\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_log_rows(empty)
    assert (e.value.line, e.value.field) == (3, "question") and "empty or missing question" in str(e.value)
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("title,body\nx,y\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_log_rows(nocol)
    assert (e.value.line, e.value.field) == (1, "question")
