"""Build lists of integers."""


def numbers_up_to(n):
    """Return [1, 2, ..., n]; an empty list when n < 1."""
    return list(range(1, n + 1))


def evens_up_to(n):
    """Return the even numbers from 2 up to and including n."""
    return [x for x in range(2, n + 1) if x % 2 == 0]
