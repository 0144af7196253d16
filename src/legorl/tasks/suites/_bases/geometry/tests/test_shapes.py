import math

from geometry.shapes import circle_area, rect_area, rect_perimeter


def test_rect_area():
    assert rect_area(2, 3) == 6


def test_rect_perimeter():
    assert rect_perimeter(2, 3) == 10
    assert rect_perimeter(1, 1) == 4


def test_circle_area():
    assert math.isclose(circle_area(2), 4 * math.pi)
