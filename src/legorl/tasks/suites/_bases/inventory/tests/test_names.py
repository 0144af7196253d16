from inventory.names import normalize, same_item


def test_normalize():
    assert normalize("  Apple ") == "apple"
    assert normalize("Pear\n") == "pear"


def test_same_item():
    assert same_item("Milk", "milk")
    assert not same_item("milk", "silk")
