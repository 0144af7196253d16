"""Grading: the rules, the staged reward-hacking defenses and the grader."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "grade": "legorl.grading.grader",
        "load_predictions": "legorl.grading.predictions",
        "grade_predictions": "legorl.grading.predictions",
    },
)
