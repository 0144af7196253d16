"""Points in the plane, as (x, y) tuples."""

import math


def translate(point, dx, dy):
    """Move a point by dx horizontally and dy vertically."""
    x, y = point
    return (x + dx, y + dy)


def distance(a, b):
    """Euclidean distance between two points."""
    return math.hypot(b[0] - a[0], b[1] - a[1])


def midpoint(a, b):
    """The point halfway between a and b."""
    return ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
