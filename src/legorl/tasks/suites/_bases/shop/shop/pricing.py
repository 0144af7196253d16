"""Prices, discounts and tax (all prices are floats in euros)."""

TAX_RATE = 0.2


def round_price(value, digits=2):
    """Round a price to the given number of decimal digits (cents by default)."""
    return round(value, digits)


def apply_discount(price, percent):
    """The price after taking percent off."""
    return round_price(price * (1 - percent / 100))


def add_tax(price, rate=TAX_RATE):
    """The price with tax added."""
    return round_price(price * (1 + rate))
