"""Training of the models raglab ships locally (no model hub): the cross-encoder reranker (reranker.py), the
bi-encoder (embedder.py, served by the dense_ft strategy of dense_ft.py), on the shared skeleton of common.py."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "train_reranker": "lab.training.reranker",
    "TrainConfig": "lab.training.reranker",
    "train_embedder": "lab.training.embedder",
    "EmbedderConfig": "lab.training.embedder",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
