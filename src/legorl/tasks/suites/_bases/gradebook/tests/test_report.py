from gradebook.report import pass_count


def test_pass_count():
    assert pass_count([10, 60, 90]) == 2
