"""Closed integer intervals."""

from intervals.core import Interval
from intervals.ops import gaps, merge_all, total_length

__all__ = ["Interval", "gaps", "merge_all", "total_length"]
