"""Areas and perimeters."""

import math


def rect_area(width, height):
    """Area of a width x height rectangle."""
    return width * height


def rect_perimeter(width, height):
    """Perimeter of a width x height rectangle."""
    return 2 * (width + height)


def circle_area(radius):
    """Area of a circle."""
    return math.pi * radius ** 2
