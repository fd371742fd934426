"""Training of the models raglab ships locally (no model hub): the cross-encoder reranker (reranker.py), the
bi-encoder (embedder.py, served by the dense_ft strategy of dense_ft.py), on the shared skeleton of common.py."""
