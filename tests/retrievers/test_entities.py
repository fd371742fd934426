"""lab.retrievers.entities: normalisation, the phrase chunker, jieba nouns, lenient parsing of LLM lists, grounding,
and the
LLM extractor on the real packaged SmolLM2 (two generations)."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.retrievers.entities import (
    PHRASE_STOPWORDS,
    PROMPT_VERSION,
    JiebaNounExtractor,
    LLMExtractor,
    PhraseExtractor,
    cached_extract,
    grounded,
    jieba_nouns,
    make_extractor,
    normalize_entity,
    normalizer_tokenizer,
    parse_entity_list,
    phrase_candidates,
    phrase_runs,
    unique_keys,
)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return normalizer_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def jieba_ex(tmp_path_factory):
    return JiebaNounExtractor(cache_dir=tmp_path_factory.mktemp("jieba"))


# --------------------------------------------------------------------------------------------- normalisation
@pytest.mark.parametrize("surface, key", [
    ("Global Routers", "global router"),
    ("global router", "global router"),
    ("  the Eiffel   Tower's ", "eiffel tower"),
    ("ＯｐｅｎＲＯＡＤ", "openroad"),  # full-width letters fold (NFKC)
    ("set_routing_alpha", "set_routing_alpha"),
    ("-max_slew", "max_slew"),
    ("北京 大学", "北京 大学"),
    ("北京大学", "北京大学"),
    ("BM25算法", "bm25 算法"),
    ("2023", ""),
    ("a", ""),
    ("the", ""),
    ("", ""),
])
def test_normalize_entity(tok, surface, key):
    assert normalize_entity(surface, tok) == key


def test_unique_keys_drops_empties_and_keeps_first_seen_order(tok):
    assert unique_keys(["Routers", "the", "router", "Placement", "2024"], tok) == ["router", "placement"]


# --------------------------------------------------------------------------------------------- phrases
def test_phrase_runs_cut_at_stopwords_punctuation_numbers_and_line_breaks():
    text = "How can one optimize the global routing of net1? Set -alpha 0.5 on the\nnet driver's loads."
    assert phrase_runs(text) == [["optimize"], ["global", "routing"], ["net1"], ["Set"], ["alpha"], ["net", "driver's",
                                                                                                          "loads"]]
    assert {"how", "can", "one", "could", "e"} <= PHRASE_STOPWORDS


def test_phrase_candidates_with_and_without_subphrases():
    text = "Maximum path depth, detailed routing."
    assert phrase_candidates(text) == ["Maximum path depth", "Maximum path", "path depth", "Maximum", "path", "depth",
                                       "detailed routing", "detailed", "routing"]
    assert phrase_candidates(text, subphrases=False) == ["Maximum path depth", "detailed routing"]
    assert phrase_candidates("alpha beta gamma delta", max_words=2, subphrases=False) == [
        "alpha beta", "beta gamma", "gamma delta"]
    with pytest.raises(ConfigError):
        phrase_candidates(text, max_words=0)


def test_phrase_extractor_expected_entities(tmp_path):
    ex = PhraseExtractor(max_words=2, cache_dir=tmp_path)
    got = ex.extract("Use the `set_routing_alpha` command to trade wirelength against path depth of a net.")
    assert got == ["use", "set_routing_alpha", "command", "trade wirelength", "trade", "wirelength", "path depth",
                   "path", "depth", "net"]
    # the same thing named differently links: plural, case, possessive
    assert "path depth" in ex.extract("What are the Path Depths?")
    assert ex.describe()["extractor"] == "phrases" and "max_words=2" in ex.identity


# --------------------------------------------------------------------------------------------- jieba
def test_jieba_nouns_pure_function():
    tagged = [("北京", "ns"), ("大学", "n"), ("的", "uj"), ("李", "nr"), ("教授", "n"), ("使用", "v"),
              ("BM25", "eng"), ("算法", "n"), ("。", "x"), ("a", "eng")]
    assert jieba_nouns(tagged) == ["北京", "大学", "北京大学", "教授", "BM25", "算法", "BM25 算法"]
    assert jieba_nouns(tagged, compounds=False) == ["北京", "大学", "教授", "BM25", "算法"]
    assert jieba_nouns(tagged, min_chars=1, compounds=False)[:4] == ["北京", "大学", "李", "教授"]


def test_jieba_extractor_on_chinese_text(jieba_ex):
    got = jieba_ex.extract("北京大学的李明在上海工作，使用BM25算法检索文档。")
    assert {"北京大学", "李明", "上海", "bm25", "算法", "bm25 算法"} <= set(got)
    assert not {"使用", "的", "在"} & set(got)  # verbs and particles are not entities
    assert jieba_ex.describe()["hmm"] is True


def test_cached_extract_reads_back_without_recomputing(jieba_ex, tmp_path):
    from lab.core.cache import Cache

    cache = Cache(tmp_path / "c")
    texts = ["上海是中国的城市。", "李明在北京大学工作。"]
    first = cached_extract(jieba_ex, texts, cache)
    assert first == [jieba_ex.extract(t) for t in texts]
    key = cache.key("kg:entities", jieba_ex.identity, texts[0])
    cache.put_json(cache.key("kg:entities", jieba_ex.identity, "新文本"), ["sentinel"])
    assert cache.get_json(key) == first[0]
    assert cached_extract(jieba_ex, ["新文本", texts[1]], cache) == [["sentinel"], first[1]]


# --------------------------------------------------------------------------------------------- LLM answers
def test_parse_entity_list_is_lenient():
    answer = ("The key entities in the text are:\n\n```\n- `configure_cts_characterization`\n- `-max_slew`\n"
              "1. **Address Sanitizer**\n2) OpenROAD, Tcl; CMake and Ninja\n* \"Global routing\".\n```\n"
              "The optimized routing of a specific net in the design is to decrease the maximum path depth.\n"
              "Use `set_routing_alpha` to change the net's alpha value in the design database now.\n"
              "Entities: 北京大学、李明，上海")
    assert parse_entity_list(answer) == [
        "configure_cts_characterization", "-max_slew", "Address Sanitizer", "OpenROAD", "Tcl", "CMake", "Ninja",
        "Global routing", "set_routing_alpha", "北京大学", "李明", "上海"]
    assert parse_entity_list("") == [] and parse_entity_list("I cannot help with that request today.") == []


def test_grounded_needs_contiguous_words_and_han_substrings():
    words = " maximum path depth net driver 北京大学 "
    compact = "maximumpathdepthnetdriver北京大学的李明"
    assert grounded("path depth", words, compact) and grounded("李明", words, compact)
    assert not grounded("depth path", words, compact) and not grounded("上海", words, compact)


def test_make_extractor_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown extractor"):
        make_extractor("spacy", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="needs an LLM"):
        make_extractor("llm", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="bad option"):
        make_extractor("phrases", cache_dir=tmp_path, options={"max_wrods": 2})


# --------------------------------------------------------------------------------------------- real LLM
def test_llm_extractor_on_real_smollm2(tmp_path):
    """Two real generations (short answers); every entity kept is grounded in its text, failures fall back to the
    phrase extractor and are counted, and a cached rerun reports the original generation time as latency debt."""
    from lab.models.llm import load_llm

    llm = load_llm(None, cache_dir=tmp_path / "llm", progress=False)
    ex = make_extractor("llm", llm=llm, fallback="phrases", cache_dir=tmp_path, options={"max_tokens": 32})
    assert isinstance(ex, LLMExtractor) and f"prompt-v{PROMPT_VERSION}" in ex.identity
    texts = ["OpenROAD runs global routing with FastRoute and detailed routing with TritonRoute.",
             "Marie Curie was born in Warsaw and worked in Paris."]
    got = ex.extract_many(texts)
    assert llm.usage()["generated"] == 2 and ex.stats["texts"] == 2
    assert 0 <= ex.stats["failures"] <= 2 and ex.stats["items_kept"] <= ex.stats["items"]
    fallback = PhraseExtractor(cache_dir=tmp_path)
    for text, keys in zip(texts, got, strict=False):
        assert keys, "an extractor always returns entities for a text that has some"
        prepared = text.lower()
        joined = f" {' '.join(ex._words(prepared))} "
        assert all(grounded(k, joined, prepared.replace(' ', '')) for k in keys), keys
        if keys == fallback.extract(text):
            continue  # this answer failed and fell back
    # a query answered from the cache: same keys, and its latency debt is the original generation's seconds
    again = ex.extract(texts[0])
    assert again == got[0] and ex.last_debt > 0 and llm.usage()["generated"] == 2
    d = ex.describe()
    assert d["prompt_version"] == PROMPT_VERSION and d["llm"] == llm.identity and d["llm_texts"] == 3
