"""Closed integer intervals [start, end]."""


class Interval:
    def __init__(self, start, end):
        if end < start:
            raise ValueError(f"end {end} is before start {start}")
        self.start = start
        self.end = end

    def __repr__(self):
        return f"Interval({self.start}, {self.end})"

    def __eq__(self, other):
        return isinstance(other, Interval) and (self.start, self.end) == (other.start, other.end)

    def __len__(self):
        """Number of integers in the interval."""
        return self.end - self.start + 1

    def contains(self, value):
        return self.start <= value <= self.end

    def overlaps(self, other):
        """True when the two intervals share at least one integer."""
        return self.start <= other.end and other.start <= self.end
