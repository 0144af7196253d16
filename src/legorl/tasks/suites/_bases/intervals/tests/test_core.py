import pytest

from intervals.core import Interval


def test_interval_basics():
    i = Interval(2, 5)
    assert len(i) == 4
    assert i.contains(2) and i.contains(5) and not i.contains(6)


def test_overlaps():
    assert Interval(1, 3).overlaps(Interval(3, 5))
    assert not Interval(1, 3).overlaps(Interval(4, 5))


def test_invalid():
    with pytest.raises(ValueError):
        Interval(5, 1)
