"""Item names are compared without case or surrounding spaces."""


def normalize(name):
    """Canonical form of an item name."""
    return name.strip().lower()


def same_item(a, b):
    """True when two names refer to the same item."""
    return normalize(a) == normalize(b)
