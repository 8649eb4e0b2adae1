"""PAGINATION_INDEX_BACKEND=files: sorted fixed-size records per group, with a write-ahead log
(docs/backends-files.md)."""
from .index import FileIndex

__all__ = ["FileIndex"]
