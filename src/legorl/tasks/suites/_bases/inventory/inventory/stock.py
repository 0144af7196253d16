"""Stock levels: a dict of item name -> quantity."""

from inventory.names import normalize


def restock(stock, name, quantity):
    """Add quantity units of an item."""
    key = normalize(name)
    stock[key] = stock.get(key, 0) + quantity
    return stock


def low_stock(stock, limit=5):
    """Names of items with fewer than limit units, sorted."""
    return sorted(name for name, qty in stock.items() if qty < limit)


def top_items(stock, n=3):
    """The n items with the most units, largest first (ties by name)."""
    ranked = sorted(stock, key=lambda name: (-stock[name], name))
    return ranked[:n]
