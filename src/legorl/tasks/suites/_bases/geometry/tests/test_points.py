from geometry.points import distance, midpoint, translate


def test_translate():
    assert translate((1, 2), 3, 0) == (4, 2)
    assert translate((1, 2), 0, 5) == (1, 7)


def test_distance():
    assert distance((0, 0), (3, 4)) == 5


def test_midpoint():
    assert midpoint((0, 0), (4, 2)) == (2, 1)
