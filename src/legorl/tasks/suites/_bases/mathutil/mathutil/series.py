"""Integer sequences."""


def factorial(n):
    """n! for n >= 0."""
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result


def fibonacci(n):
    """The first n Fibonacci numbers, starting 0, 1."""
    numbers = []
    a, b = 0, 1
    for _ in range(n):
        numbers.append(a)
        a, b = b, a + b
    return numbers


def sum_of_squares(n):
    """1**2 + 2**2 + ... + n**2."""
    return sum(i * i for i in range(1, n + 1))
