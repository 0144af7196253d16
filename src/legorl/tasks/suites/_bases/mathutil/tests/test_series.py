from mathutil.series import factorial, fibonacci, sum_of_squares


def test_factorial():
    assert factorial(0) == 1
    assert factorial(5) == 120


def test_fibonacci():
    assert fibonacci(6) == [0, 1, 1, 2, 3, 5]


def test_sum_of_squares():
    assert sum_of_squares(3) == 14
