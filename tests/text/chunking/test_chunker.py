"""lab.text.chunking.chunker: offsets round trip and ids, short and empty documents, Chinese in chars, prefixes,
params, chunks back to a corpus, and the same chunks with the memos warm or cold."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.data.types import Document
from lab.text.chunking import (
    Chunker,
    chunk_corpus,
    chunk_id,
    chunk_to_doc,
    chunks_to_corpus,
    describe_chunking,
    doc_id_of,
    unit_offsets,
)
from lab.text.chunking.units import TOKEN_OFFSETS

DATA = Path(__file__).resolve().parents[3] / "data"


@pytest.mark.parametrize("chunker,unit,size,overlap", [
    ("recursive", "tokens", 64, 8), ("fixed", "tokens", 64, 16), ("recursive", "words", 40, 0),
    ("fixed", "words", 50, 10), ("recursive", "chars", 300, 40), ("fixed", "chars", 200, 0), ("none", "tokens", 1, 0),
])
def test_offsets_round_trip_and_ids(sample_docs, tokenizer, chunker, unit, size, overlap):
    chunks = chunk_corpus(sample_docs, chunker, size, overlap, unit, tokenizer, progress=False)
    by_id = {d.id: d for d in sample_docs}
    assert len({c.id for c in chunks}) == len(chunks)
    assert {c.doc_id for c in chunks} == set(by_id)
    for c in chunks:
        doc = by_id[c.doc_id]
        assert doc.text[c.start:c.end] == c.body
        assert c.text == c.prefix + c.body and c.prefix == doc.title + "\n"
        assert c.id == f"{c.doc_id}@{c.start}-{c.end}" and doc_id_of(c.id) == c.doc_id
        assert c.title == doc.title
    if chunker != "none":  # sizes hold, counted as the units are counted
        units = dict(zip(by_id, unit_offsets([d.text for d in sample_docs], unit, tokenizer), strict=False))
        for c in chunks:
            starts = units[c.doc_id][:, 0]
            assert np.searchsorted(starts, c.end) - np.searchsorted(starts, c.start) <= size
    # the same params give the same ids again (stable across runs)
    again = chunk_corpus(sample_docs, chunker, size, overlap, unit, tokenizer, progress=False)
    assert [c.id for c in again] == [c.id for c in chunks]


def test_short_and_empty_documents_are_one_chunk_with_offset_id():
    docs = [Document("short", "One sentence only.  ", "T"), Document("empty", "", "Only a title"),
            Document("a@b", "x y z")]
    chunks = chunk_corpus(docs, "recursive", 32, 4, "words", progress=False)
    assert [c.id for c in chunks] == ["short@0-20", "empty@0-0", "a@b@0-5"]
    assert chunks[0].body == "One sentence only.  "  # a one-chunk document keeps its whole text
    assert chunks[1].text == "Only a title\n" and chunks[1].body == ""
    assert doc_id_of("a@b@0-5") == "a@b"
    with pytest.raises(ValueError):
        doc_id_of("plain-doc-id")
    # the same document gives the same one-chunk id whatever the size (stable across a size sweep)
    for size in (8, 64, 512):
        assert chunk_corpus(docs[:1], "fixed", size, 0, "words", progress=False)[0].id == "short@0-20"
    assert chunk_id("d", 3, 9) == "d@3-9"


def test_chinese_with_chars_unit():
    from lab.data.beir import load_dataset

    cmrc = load_dataset(DATA / "cmrc2018", splits=["dev"], progress=False)
    docs = list(cmrc.corpus)[:80]
    chunks = chunk_corpus(docs, "recursive", 128, 16, "chars", progress=False)
    by_id = {d.id: d for d in docs}
    assert len(chunks) > len(docs)  # paragraphs are longer than 128 characters
    ends_at_sentence = 0
    for c in chunks:
        doc = by_id[c.doc_id]
        assert doc.text[c.start:c.end] == c.body and len(c.body) <= 128
        assert c.prefix == doc.title + "\n"
        ends_at_sentence += c.end == len(doc.text.rstrip()) or c.body[-1] in "。！？；”’」』）)"
    assert ends_at_sentence / len(chunks) > 0.9
    # chars is the unit for Chinese: the word unit would see a paragraph as a handful of "words"
    assert len(chunk_corpus(docs, "recursive", 128, 16, "words", progress=False)) < len(chunks)


def test_title_and_markdown_heading_prefix_not_in_offsets():
    text = "# Install\n## Build\n\nRun the build script now.\n\n```sh\n# not a heading\nmake\n```\n\n" \
           "## Test\n\nRun the tests after the build."
    doc = Document("md", text, "Guide")
    chunks = chunk_corpus([doc], "recursive", 6, 0, "words", progress=False)
    assert chunks[0].prefix == "Guide\n"  # the chunk holds its own headings
    by_body = {c.body: c for c in chunks}
    assert by_body["Run the build script now."].prefix == "Guide\nInstall > Build\n"
    assert by_body["Run the tests after the build."].prefix == "Guide\nInstall > Test\n"
    for c in chunks:
        assert text[c.start:c.end] == c.body and c.text == c.prefix + c.body
    plain = chunk_corpus([doc], "recursive", 6, 0, "words", title_prefix=False, progress=False)
    assert [c.id for c in plain] == [c.id for c in chunks] and all(c.text == c.body for c in plain)


def test_params_are_checked_and_described():
    with pytest.raises(ConfigError, match="chunker"):
        Chunker("sentences")
    with pytest.raises(ConfigError, match="size_unit"):
        Chunker(size_unit="bytes")
    with pytest.raises(ConfigError, match="overlap"):
        Chunker(size=32, overlap=32)
    assert describe_chunking("recursive", 128, 16) == {
        "chunker": "recursive", "chunk_size": 128, "chunk_overlap": 16, "chunk_unit": "tokens",
        "chunk_tokenizer": "all-MiniLM-L6-v2", "title_prefix": True}
    assert describe_chunking("fixed", 200, 0, "chars")["chunk_tokenizer"] is None
    assert describe_chunking("none")["chunk_size"] is None


def test_chunks_to_corpus_indexes_chunks_as_documents():
    docs = [Document("a", "Alpha one. Alpha two. Alpha three.", "TA"), Document("b", "Beta.", "")]
    chunks = chunk_corpus(docs, "recursive", 3, 0, "words", progress=False)
    corpus = chunks_to_corpus(chunks, name="toy")
    assert corpus.ids == [c.id for c in chunks] and len(corpus) == 4
    d = corpus["a@11-21"]
    assert d.text == "TA\nAlpha two." and d.title == ""
    assert dict(d.metadata) == {"doc_id": "a", "start": 11, "end": 21, "title": "TA"}
    assert chunk_to_doc(chunks)["b@0-5"] == "b"


@pytest.mark.slow
def test_whole_scifact_chunks_in_seconds(scifact, tokenizer):
    import time

    t0 = time.process_time()
    chunks = chunk_corpus(scifact.corpus, "recursive", 256, 32, "tokens", tokenizer, progress=False)
    cpu = time.process_time() - t0
    assert len({c.id for c in chunks}) == len(chunks) >= len(scifact.corpus)
    assert cpu < 30, f"chunking SciFact took {cpu:.1f} s of CPU"
    assert all(re.fullmatch(r".+@\d+-\d+", c.id) for c in chunks[:1000])


def test_chunks_are_the_same_with_the_memo_warm_or_cold(sample_docs):
    TOKEN_OFFSETS.clear()
    cold = chunk_corpus(sample_docs, "recursive", 64, 16, progress=False)
    warm = chunk_corpus(sample_docs, "recursive", 64, 16, progress=False)
    assert TOKEN_OFFSETS.hits == len(sample_docs) and cold == warm
