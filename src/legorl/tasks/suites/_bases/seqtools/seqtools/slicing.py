"""Cut sequences into pieces."""


def chunks(items, size):
    """Split items into lists of at most `size` elements."""
    if size < 1:
        raise ValueError("size must be at least 1")
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def last(items, default=None):
    """Return the last element of items, or `default` when items is empty."""
    return items[-1] if items else default
