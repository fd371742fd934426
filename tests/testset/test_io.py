"""lab.testset.io: units, BEIR writing that load_dataset reads back, spreadsheet CSV, tiers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.core.errors import ConfigError, DataError
from lab.data.beir import load_dataset
from lab.data.types import Corpus, Document
from lab.testset.io import (
    load_units,
    parse_chunking,
    read_csv,
    read_provenance,
    read_tiers,
    write_beir_set,
    write_csv,
    write_tiers,
)

REPO = Path(__file__).resolve().parents[2]
ORDQA = REPO / "data" / "ord-qa"


def test_parse_chunking():
    assert parse_chunking(None) is None and parse_chunking("none") is None
    assert parse_chunking("recursive") == {"chunker": "recursive"}
    assert parse_chunking("fixed,size=128,overlap=16,size_unit=words,title_prefix=false") == {
        "chunker": "fixed", "size": 128, "overlap": 16, "size_unit": "words", "title_prefix": False}
    assert parse_chunking({"chunker": "none"}) is None
    with pytest.raises(ConfigError, match="key=value"):
        parse_chunking("recursive,256")


def test_units_unchunked_keep_ids_and_chunked_carry_document_metadata():
    plain = load_units(ORDQA, None, progress=False)
    assert plain.corpus.ids == plain.dataset.corpus.ids and plain.chunking == {"chunker": "none"}
    chunked = load_units(plain.dataset, "recursive,size=64,overlap=0,size_unit=words", progress=False)
    assert len(chunked.corpus) > len(plain.corpus)
    unit = next(iter(chunked.corpus))
    doc = plain.dataset.corpus[unit.metadata["doc_id"]]
    assert unit.id.startswith(doc.id + "@") and unit.metadata["source"] == doc.metadata["source"]
    assert doc.text[unit.metadata["start"]:unit.metadata["end"]] in unit.text
    d = chunked.describe()
    assert d["n_units"] == len(chunked.corpus) and d["chunking"]["chunk_size"] == 64 and d["source_fingerprint"]


def test_written_set_loads_unchanged(tmp_path):
    corpus = Corpus({"a": Document("a", "alpha text", "A", {"source": "s"}), "b": Document("b", "béta 中文")})
    folder = write_beir_set(tmp_path / "set", corpus, {"q1": ("what is alpha?", {"answer": "alpha"}),
                                                      "q2": ("和 b?", {})},
                            {"q1": {"a": 2}, "q2": {"b": 1, "a": 0}}, {"kind": "test", "seed": 3})
    ds = load_dataset(folder, progress=False)
    assert ds.corpus["b"].text == "béta 中文" and ds.corpus["a"].metadata == {"source": "s"}
    assert ds.queries.metadata["q1"] == {"answer": "alpha"} and "q2" not in ds.queries.metadata
    assert ds.qrels["test"].qrels == {"q1": {"a": 2}, "q2": {"b": 1, "a": 0}}
    assert read_provenance(folder) == {"kind": "test", "seed": 3}
    assert read_provenance(tmp_path) == {}


def test_csv_has_bom_roundtrips_multiline_cells_and_names_lines(tmp_path):
    path = write_csv(tmp_path / "s.csv", ["qid", "passage", "verdict"],
                     [{"qid": "1", "passage": 'two\nlines, "quoted"', "verdict": "keep"},
                      {"qid": "2", "passage": "x" * 40_000, "verdict": ""}])
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    rows = list(read_csv(path))
    assert rows[0] == (2, {"qid": "1", "passage": 'two\nlines, "quoted"', "verdict": "keep"})
    assert rows[1][0] == 4 and len(rows[1][1]["passage"]) < 33_000  # cut for Excel, line after the 2-line record
    semi = tmp_path / "excel_de.csv"  # Excel in a comma-decimal locale saves with semicolons
    semi.write_text("QID;Verdict\n7;drop\n", encoding="utf-8")
    assert list(read_csv(semi)) == [(2, {"qid": "7", "verdict": "drop"})]
    with pytest.raises(DataError) as e:
        list(read_csv(semi, required=("grade",)))
    assert e.value.line == 1 and e.value.field == "grade"


def test_tiers_roundtrip_and_bad_tier(tmp_path):
    write_tiers(tmp_path, {"q": {"a": "core", "b": "edge"}})
    assert read_tiers(tmp_path) == {"q": {"a": "core", "b": "edge"}}
    (tmp_path / "tiers.json").write_text(json.dumps({"q": {"a": "gold"}}))
    with pytest.raises(DataError, match="gold"):
        read_tiers(tmp_path)


def test_load_source_needs_only_a_corpus(tmp_path):
    """A folder `lab ingest` wrote (corpus.jsonl alone) is a source of units; queries, when present, are read (the
    generator keeps its questions away from them); no corpus is a one-line error that says what to do."""
    from lab.core.errors import DataError
    from lab.testset.io import load_source, load_units

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"_id": "guides/install", "title": "Install", "text": "Run make."}\n',
                                         encoding="utf-8")
    ds = load_source(folder)
    assert [d.id for d in ds.corpus] == ["guides/install"] and len(ds.queries) == 0 and ds.qrels == {}
    assert load_units(folder).corpus["guides/install"].text == "Run make."
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "How do I build it?"}\n', encoding="utf-8")
    assert load_source(folder).queries["q1"] == "How do I build it?"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="corpus file not found") as e:
        load_source(empty)
    assert "lab ingest" in str(e.value)
