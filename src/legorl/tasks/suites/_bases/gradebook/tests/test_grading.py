from gradebook.grading import is_passing, letter_grade


def test_is_passing_at_threshold():
    assert is_passing(50)
    assert is_passing(70, threshold=70)


def test_is_passing_above_and_below():
    assert is_passing(80)
    assert not is_passing(49)


def test_letter_grade():
    assert letter_grade(95) == "A"
    assert letter_grade(80) == "B"
    assert letter_grade(50) == "C"
    assert letter_grade(10) == "F"
