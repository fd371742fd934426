"""lab.models.flops: the FLOPs of a BERT-style encoder, checked by hand and against the packaged MiniLM."""
from __future__ import annotations

import pytest

from lab.models.embedders import load_embedder
from lab.models.flops import EncoderShape, encoder_shape


def test_text_flops_by_hand():
    s = EncoderShape(layers=1, hidden=2, ffn=3)
    # 2 tokens: 2 * 2 * (4*4 + 2*2*3) = 112 for the projections, 4 * 2^2 * 2 = 32 for attention
    assert s.text_flops(2) == 144.0
    assert s.flops([2, 2, 0]) == 288.0


def test_minilm_shape_and_its_flops_per_token():
    shape = encoder_shape(load_embedder("all-MiniLM-L6-v2", backend="torch", progress=False))
    assert shape == EncoderShape(6, 384, 1536)
    assert shape.text_flops(256) / 256 == pytest.approx(23.4e6, rel=0.01)
    assert encoder_shape(object()) is None
