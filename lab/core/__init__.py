"""Core: errors, repository paths, progress bars, the content-addressed cache, flat params and network helpers."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "LabError": "lab.core.errors",
    "ConfigError": "lab.core.errors",
    "DataError": "lab.core.errors",
    "TrackingError": "lab.core.errors",
    "repo_root": "lab.core.paths",
    "resolve_repo_path": "lab.core.paths",
    "progress": "lab.core.progress",
    "Cache": "lab.core.cache",
    "EmbeddingCache": "lab.core.cache",
    "content_key": "lab.core.cache",
    "flatten": "lab.core.flat",
    "unflatten": "lab.core.flat",
    "config_hash": "lab.core.flat",
    "canonical_json": "lab.core.flat",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
