"""Grade students' scores."""

from gradebook.grading import is_passing, letter_grade
from gradebook.report import pass_count

__all__ = ["is_passing", "letter_grade", "pass_count"]
