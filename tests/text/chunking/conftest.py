"""Fixtures of the chunking tests: real SciFact text and the packaged model's tokenizer, loaded once per module."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.text.chunking.units import load_tokenizer

DATA = Path(__file__).resolve().parents[3] / "data"


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
