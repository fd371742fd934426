"""The chunkers over one document (lab.text.chunking.spans), through chunk_corpus on real SciFact text: fixed
windows and their overlap in words, no cut inside a word, recursive cuts at sentence ends, whole-sentence overlap."""
from __future__ import annotations

from lab.data.types import Document
from lab.text.chunking import chunk_corpus, sentences


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)



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
