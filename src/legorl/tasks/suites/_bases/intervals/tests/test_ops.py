from intervals.core import Interval
from intervals.ops import gaps, merge_all, total_length


def test_merge_overlapping():
    merged = merge_all([Interval(5, 8), Interval(1, 3), Interval(2, 6)])
    assert merged == [Interval(1, 8)]


def test_merge_disjoint():
    assert merge_all([Interval(10, 12), Interval(1, 2)]) == [Interval(1, 2), Interval(10, 12)]


def test_total_length():
    assert total_length([Interval(1, 3), Interval(2, 6), Interval(10, 10)]) == 7


def test_gaps():
    found = gaps([Interval(2, 3), Interval(6, 7)], 0, 10)
    assert found == [Interval(0, 1), Interval(4, 5), Interval(8, 10)]
