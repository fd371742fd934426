"""Training of the models raglab ships locally (no model hub): the cross-encoder reranker (reranker.py)."""
