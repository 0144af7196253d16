from inventory.stock import low_stock, restock, top_items


def test_restock():
    stock = {"apple": 2}
    restock(stock, "Apple", 3)
    restock(stock, "kiwi", 1)
    assert stock == {"apple": 5, "kiwi": 1}


def test_low_stock():
    assert low_stock({"apple": 2, "kiwi": 9, "fig": 4}) == ["apple", "fig"]


def test_top_items():
    stock = {"apple": 2, "kiwi": 9, "fig": 4, "plum": 7}
    assert top_items(stock) == ["kiwi", "plum", "fig"]
    assert top_items(stock, n=1) == ["kiwi"]
