"""Operations on lists of intervals."""

from intervals.core import Interval


def merge_all(intervals):
    """Merge overlapping or adjacent intervals ([1, 3] and [4, 6] become [1, 6]), sorted by start."""
    merged = []
    for item in sorted(intervals, key=lambda i: (i.start, i.end)):
        if merged and item.start <= merged[-1].end + 1:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, item.end))
        else:
            merged.append(item)
    return merged


def total_length(intervals):
    """How many integers are covered by at least one interval."""
    return sum(len(i) for i in merge_all(intervals))


def gaps(intervals, start, end):
    """The intervals of integers in [start, end] that no interval covers."""
    result = []
    cursor = start
    for item in merge_all(intervals):
        if item.end < cursor:
            continue
        if item.start > end:
            break
        if item.start > cursor:
            result.append(Interval(cursor, item.start - 1))
        cursor = max(cursor, item.end + 1)
    if cursor <= end:
        result.append(Interval(cursor, end))
    return result
