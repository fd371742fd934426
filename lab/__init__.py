"""raglab: measure and improve the retrieval half of RAG systems."""

__version__ = "0.1.0"

#: Version of the metric definitions. Bump on any change of convention (cut-offs, tie rule,
#: relevance threshold, gain function) so numbers from different versions are never compared silently.
METRICS_VERSION = "1"
