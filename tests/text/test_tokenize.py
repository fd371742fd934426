"""lab.text.tokenize: English path (lowercase, \\w+, stopwords, Snowball), Chinese path (jieba), language handling."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.text.tokenize import (
    LUCENE_STOPWORDS,
    NLTK_STOPWORDS,
    TEXT_TOKENS,
    Tokenizer,
    detect_language,
    han_share,
    tokenize,
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def zh(cache):
    """One jieba-backed Tokenizer for the module (loading jieba's dictionary takes seconds)."""
    return Tokenizer(language="zh", cache_dir=cache)


def test_english_defaults_lowercase_stopwords_snowball():
    tk = Tokenizer(language="en")
    assert tk("The Running cells of 0-dimensional biomaterials") == ["run", "cell", "0", "dimension", "biomateri"]


def test_stem_options():
    assert Tokenizer(stem=False, stopwords=None)("Running Studies") == ["running", "studies"]
    # Snowball English (Porter2) and the original Porter differ on some words
    assert Tokenizer(stem="english")("generously organization") == ["generous", "organiz"]
    assert Tokenizer(stem="porter")("generously organization") == ["gener", "organ"]


def test_stopword_lists():
    assert len(LUCENE_STOPWORDS) == 33 and {"the", "a", "with"} <= LUCENE_STOPWORDS
    assert "between" in NLTK_STOPWORDS and "between" not in LUCENE_STOPWORDS
    assert len(NLTK_STOPWORDS) == 153 and not any("'" in w for w in NLTK_STOPWORDS)
    text = "the effect between a and b"
    assert Tokenizer(stem=False)(text) == ["effect", "between", "b"]
    assert Tokenizer(stem=False, stopwords="nltk")(text) == ["effect", "b"]
    assert Tokenizer(stem=False, stopwords=None)(text) == ["the", "effect", "between", "a", "and", "b"]
    assert Tokenizer(stem=False, stopwords=["Effect"])(text) == ["the", "between", "a", "and", "b"]


def test_stopwords_apply_before_stemming():
    # "this" is a stopword; its stem "thi" must not be, and a stemmed form of a stopword is kept
    assert Tokenizer()("this thing") == ["thing"]
    assert Tokenizer(stopwords=["run"])("run running") == ["run"]


def test_possessive_and_unicode_normalisation():
    tk = Tokenizer(stem=False, stopwords=None)
    assert tk("the cell's and cell’s") == ["the", "cell", "and", "cell"]
    assert tk("ＡＢＣ２０１８ ﬁsh") == ["abc2018", "fish"]  # NFKC: full-width forms and ligatures
    assert Tokenizer(stem=False, stopwords=None, normalize=None)("ＡＢＣ") == ["ａｂｃ"]


def test_unicode_words_keep_non_ascii_letters():
    assert Tokenizer(stem=False, stopwords=None)("Café naïve Ωmega") == ["café", "naïve", "ωmega"]


def test_han_runs_split_off_and_segmented_by_jieba(zh, cache):
    toks = zh("abc中华人民共和国def")
    assert toks[0] == "abc" and toks[-1] == "def"
    # jieba search mode: the accurate-cut word plus its dictionary sub-words
    assert {"中华", "人民", "共和国", "中华人民共和国"} <= set(toks[1:-1])
    assert (cache / "jieba" / "jieba.cache").is_file()  # jieba's cache lives in the project cache


def test_mixed_text_english_part_is_stemmed(zh):
    toks = zh("北京大学 studies the cells")
    assert "北京大学" in toks and "北京" in toks and toks[-2:] == ["studi", "cell"]


def test_same_word_same_tokens_in_english_and_chinese_context(zh):
    tk = zh
    assert set(tk("北京")) <= set(tk("我在北京工作")) & set(tk("a trip to 北京 in spring"))


def test_language_en_never_loads_jieba():
    tk = Tokenizer(language="en", stem=False)
    assert tk("北京 Beijing") == ["北", "京", "beijing"]  # Lucene StandardTokenizer: one token per ideograph
    assert tk._jieba is None
    assert tk.describe()["han"] == "chars"


def test_auto_loads_jieba_only_for_han_text(cache):
    tk = Tokenizer(cache_dir=cache)
    tk.tokenize(["plain English text", "more text"])
    assert tk._jieba is None
    tk("中文")
    assert tk._jieba is not None


def test_traditional_chinese_is_segmented(zh):
    toks = zh("我們在臺灣讀書")
    assert "".join(toks) == "我們在臺灣讀書" and "我們" in toks  # every character kept; known words found


def test_user_dict(tmp_path, cache, zh):
    text = "战国无双系列"
    assert "战国无双" not in zh(text)
    ud = tmp_path / "user.txt"
    ud.write_text("战国无双 10 n\n", encoding="utf-8")
    tk = Tokenizer(user_dict=ud, cache_dir=cache)
    assert "战国无双" in tk(text)
    d = tk.describe()
    assert d["user_dict"].startswith("user.txt@") and len(d["user_dict"]) == len("user.txt@") + 16
    # a user dictionary is per Tokenizer: no global jieba state changed
    assert "战国无双" not in zh(text)


def test_detect_language():
    assert detect_language("北京大学是一所大学") == "zh"
    assert detect_language("Peking University is a university") == "en"
    assert detect_language("") == "en"
    assert han_share("ab北京") == pytest.approx(0.5)


def test_tokenize_many_matches_one_by_one(zh):
    texts = ["The cells", "", "中文 text", "running running"]
    tk = zh
    assert tk.tokenize(texts) == [tk(t) for t in texts]
    assert tokenize(["The cells", "running running"], language="en") == [["cell"], ["run", "run"]]
    assert tk.tokenize(texts)[1] == []


def test_describe():
    d = Tokenizer(language="en", stem="porter", stopwords="nltk").describe()
    assert d == {"language": "en", "stemmer": "snowball-porter", "stopwords": "nltk", "normalize": "NFKC",
                 "han": "chars", "user_dict": None, "jieba_dict": None}
    assert Tokenizer(stem=False, stopwords=None).describe()["stemmer"] is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"language": "fr"}, "language='fr'"),
        ({"stopwords": "german"}, "unknown list"),
        ({"stem": "lancaster"}, "stem='lancaster'"),
        ({"user_dict": "/no/such/dict.txt"}, "no such file"),
    ],
)
def test_bad_options_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Tokenizer(**kwargs)


def test_bad_user_dict_encoding(tmp_path, cache):
    ud = tmp_path / "bad.txt"
    ud.write_bytes("战国无双 3\n".encode("gbk"))
    with pytest.raises(ConfigError, match="bad.txt"):
        Tokenizer(language="zh", user_dict=ud, cache_dir=cache)


def test_memo_gives_the_same_tokens_and_tokenises_each_text_once_per_identity(zh):
    texts = ["The cells' running", "中文 text", "The cells' running", "unseen words here"]
    plain = zh.tokenize(texts)
    TEXT_TOKENS.clear()
    assert zh.tokenize(texts[:2], memo=True) == plain[:2]
    assert (TEXT_TOKENS.hits, TEXT_TOKENS.misses) == (0, 2)
    other = Tokenizer(language="zh", cache_dir=zh.cache_dir)  # a new instance of the same settings shares them
    assert other.tokenize(texts, memo=True) == plain
    assert (TEXT_TOKENS.hits, TEXT_TOKENS.misses) == (3, 3)
    out = other.tokenize(texts, memo=True)
    out[0].append("changed")  # callers get their own lists
    assert other.tokenize(texts[:1], memo=True) == plain[:1]
    unstemmed = Tokenizer(language="zh", stem=False, cache_dir=zh.cache_dir)
    assert unstemmed.identity != zh.identity
    assert unstemmed.tokenize(texts[:1], memo=True) == [["cells", "running"]]  # not the stemmed tokens memoised
