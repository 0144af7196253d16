"""Turn numeric scores (0-100) into verdicts."""

PASS_MARK = 50


def is_passing(score, threshold=PASS_MARK):
    """Return True when the score reaches the threshold (a score equal to it passes)."""
    return score >= threshold


def letter_grade(score):
    """Return "A" (90+), "B" (75+), "C" (50+) or "F"."""
    if score >= 90:
        return "A"
    if score >= 75:
        return "B"
    if score >= 50:
        return "C"
    return "F"
