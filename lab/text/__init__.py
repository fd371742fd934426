"""Text: tokenisation (English stemming, jieba) and chunking, with chunk / document / span relevance."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "tokenize": "lab.text.tokenize",
    "Tokenizer": "lab.text.tokenize",
    "detect_language": "lab.text.tokenize",
    "Chunk": "lab.text.chunking",
    "Chunker": "lab.text.chunking",
    "chunk_corpus": "lab.text.chunking",
    "Relevance": "lab.text.chunking",
    "relevance_for": "lab.text.chunking",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
