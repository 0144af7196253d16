from shop.pricing import add_tax, apply_discount, round_price


def test_round_price():
    assert round_price(3.14159) == 3.14
    assert round_price(2.5, 0) == 2.0


def test_apply_discount():
    assert apply_discount(100, 15) == 85.0
    assert apply_discount(80, 0) == 80.0


def test_add_tax():
    assert add_tax(10) == 12.0
    assert add_tax(10, rate=0.05) == 10.5
