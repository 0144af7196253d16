from shop.cart import cart_total, has_items, item_count

CART = [("pen", 1.5, 2), ("book", 12.25, 1)]


def test_cart_total():
    assert cart_total(CART) == 15.25


def test_item_count():
    assert item_count(CART) == 3


def test_has_items():
    assert has_items(CART)
    assert not has_items([])
