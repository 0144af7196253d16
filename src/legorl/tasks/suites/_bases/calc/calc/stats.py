"""Simple statistics over lists of numbers."""


def total(values):
    """Return the sum of all values (0 for an empty list)."""
    result = 0
    for value in values:
        result += value
    return result


def mean(values):
    """Return the arithmetic mean; raise ValueError for an empty list."""
    if not values:
        raise ValueError("mean of an empty list")
    return total(values) / len(values)
