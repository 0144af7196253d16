"""Small helpers for building and slicing sequences."""

from seqtools.build import evens_up_to, numbers_up_to
from seqtools.slicing import chunks, last

__all__ = ["numbers_up_to", "evens_up_to", "chunks", "last"]
