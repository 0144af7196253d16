from mathutil.bounds import clamp, in_range, normalize, percent


def test_in_range():
    assert in_range(5, 1, 10)
    assert in_range(1, 1, 10)
    assert not in_range(0, 1, 10)
    assert not in_range(11, 1, 10)


def test_clamp():
    assert clamp(15, 0, 10) == 10
    assert clamp(-3, 0, 10) == 0
    assert clamp(4, 0, 10) == 4


def test_percent():
    assert percent(1, 4) == 25.0
    assert percent(3, 3) == 100.0


def test_normalize():
    assert normalize([1, 3]) == [0.25, 0.75]
