from seqtools.build import evens_up_to, numbers_up_to


def test_numbers_up_to():
    assert numbers_up_to(5) == [1, 2, 3, 4, 5]
    assert numbers_up_to(1) == [1]


def test_numbers_up_to_empty():
    assert numbers_up_to(0) == []


def test_evens_up_to():
    assert evens_up_to(7) == [2, 4, 6]
