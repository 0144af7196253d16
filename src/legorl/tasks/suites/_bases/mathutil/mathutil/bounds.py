"""Ranges, ratios and percentages."""


def in_range(value, low, high):
    """True when low <= value <= high."""
    return low <= value and value <= high


def clamp(value, low, high):
    """Limit value to the range [low, high]."""
    return max(low, min(value, high))


def ratio(part, whole):
    """part / whole as a float."""
    return part / whole


def percent(part, whole):
    """What percentage of whole part is."""
    return ratio(part, whole) * 100


def normalize(values):
    """Scale values so that they sum to 1."""
    total = sum(values)
    return [value / total for value in values]
