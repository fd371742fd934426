"""Retrieval strategies, one module each, registered by name (see base.py)."""
from lab.retrievers.base import BaseRetriever, Context, Retriever, available, build, register

__all__ = ["BaseRetriever", "Context", "Retriever", "available", "build", "register"]
