from csvlite.types import coerce


def test_coerce_numbers():
    assert coerce("42") == 42
    assert coerce(" 7 ") == 7
    assert coerce("2.5") == 2.5


def test_coerce_other():
    assert coerce("") is None
    assert coerce("True") is True
    assert coerce("false") is False
    assert coerce("abc") == "abc"
