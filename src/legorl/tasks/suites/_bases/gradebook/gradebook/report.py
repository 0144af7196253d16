"""Summaries over many scores."""

from gradebook.grading import is_passing


def pass_count(scores, threshold=50):
    """Return how many scores pass."""
    return sum(1 for score in scores if is_passing(score, threshold))
