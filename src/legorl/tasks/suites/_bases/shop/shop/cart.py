"""A shopping cart is a list of (name, unit_price, quantity) tuples."""

from shop.pricing import round_price


def cart_total(items):
    """Sum of unit_price * quantity over all items."""
    return round_price(sum(price * qty for _, price, qty in items))


def item_count(items):
    """Total number of units in the cart."""
    return sum(qty for _, _, qty in items)


def has_items(items):
    """True when the cart holds at least one item."""
    return len(items) != 0
