from seqtools.slicing import chunks, last


def test_chunks():
    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_last():
    assert last([1, 2, 3]) == 3
    assert last([], default="none") == "none"
