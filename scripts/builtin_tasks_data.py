"""Specs of the built-in tasks (see make_builtin_tasks.py): correct repositories and injected bugs.

``BASES[name]`` maps repo-relative paths to file text (the *correct* repository, visible tests
included). Each entry of ``TASKS``: ``tier``, ``n`` (instance number), ``base``, ``bug`` (a list of
``(path, correct_text, buggy_text)``), ``hidden`` (test text appended to / creating test files; it
becomes the test_patch) and ``statement`` (the issue text; for trivial tasks the generator appends
the name of the failing test).
"""

from __future__ import annotations

import textwrap


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


BASES: dict[str, dict[str, str]] = {}
TASKS: list[dict] = []

# ==================================================================================================
# trivial: short modules, one-line bugs, the failing test is visible
# ==================================================================================================

BASES["textkit"] = {
    "README.md": "# textkit\n\nSmall helpers for words and letter case. Run the tests with `python -m pytest`.\n",
    "textkit/__init__.py": src(r'''
        """Small helpers for words and letter case."""

        from textkit.case import shout, snake_to_camel, title_words
        from textkit.count import longest_word, word_count

        __all__ = ["shout", "snake_to_camel", "title_words", "longest_word", "word_count"]
    '''),
    "textkit/case.py": src(r'''
        """Changing the case of words."""


        def shout(text):
            """Return the text in upper case followed by an exclamation mark."""
            return text.upper() + "!"


        def title_words(text):
            """Capitalize the first letter of every word."""
            return " ".join(word.capitalize() for word in text.split())


        def snake_to_camel(name):
            """Turn snake_case into camelCase."""
            first, *rest = name.split("_")
            return first + "".join(part.capitalize() for part in rest)
    '''),
    "textkit/count.py": src(r'''
        """Counting words."""


        def word_count(text):
            """Return the number of whitespace-separated words in text."""
            words = text.split()
            return len(words)


        def longest_word(text):
            """Return the longest word (the first one on ties); "" for empty text."""
            best = ""
            for word in text.split():
                if len(word) > len(best):
                    best = word
            return best
    '''),
    "tests/test_case.py": src(r'''
        from textkit.case import shout, snake_to_camel, title_words


        def test_shout():
            assert shout("hi") == "HI!"
            assert shout("Stop") == "STOP!"


        def test_title_words():
            assert title_words("hello big world") == "Hello Big World"


        def test_snake_to_camel():
            assert snake_to_camel("max_line_length") == "maxLineLength"
            assert snake_to_camel("name") == "name"
    '''),
    "tests/test_count.py": src(r'''
        from textkit.count import longest_word, word_count


        def test_word_count():
            assert word_count("the quick brown fox") == 4
            assert word_count("") == 0


        def test_longest_word():
            assert longest_word("a bb ccc dd") == "ccc"
            assert longest_word("") == ""
    '''),
}

TASKS.append(dict(
    tier="trivial", n=4, base="textkit",
    bug=[("textkit/case.py", "return text.upper() + \"!\"", "return text.lower() + \"!\"")],
    statement='`textkit.case.shout(text)` does not shout: `shout("hi")` returns `"hi!"` instead of `"HI!"`. '
              "It should return the text in upper case followed by an exclamation mark.",
))
TASKS.append(dict(
    tier="trivial", n=5, base="textkit",
    bug=[("textkit/count.py", "    return len(words)\n", "    return len(text)\n")],
    statement='`textkit.count.word_count(text)` counts characters instead of words: '
              '`word_count("the quick brown fox")` returns `19` instead of `4`. It should return the number '
              "of whitespace-separated words.",
))

BASES["geometry"] = {
    "README.md": "# geometry\n\nAreas, perimeters and points in the plane. Run the tests with `python -m pytest`.\n",
    "geometry/__init__.py": '"""Areas, perimeters and points in the plane."""\n',
    "geometry/shapes.py": src(r'''
        """Areas and perimeters."""

        import math


        def rect_area(width, height):
            """Area of a width x height rectangle."""
            return width * height


        def rect_perimeter(width, height):
            """Perimeter of a width x height rectangle."""
            return 2 * (width + height)


        def circle_area(radius):
            """Area of a circle."""
            return math.pi * radius ** 2
    '''),
    "geometry/points.py": src(r'''
        """Points in the plane, as (x, y) tuples."""

        import math


        def translate(point, dx, dy):
            """Move a point by dx horizontally and dy vertically."""
            x, y = point
            return (x + dx, y + dy)


        def distance(a, b):
            """Euclidean distance between two points."""
            return math.hypot(b[0] - a[0], b[1] - a[1])


        def midpoint(a, b):
            """The point halfway between a and b."""
            return ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
    '''),
    "tests/test_shapes.py": src(r'''
        import math

        from geometry.shapes import circle_area, rect_area, rect_perimeter


        def test_rect_area():
            assert rect_area(2, 3) == 6


        def test_rect_perimeter():
            assert rect_perimeter(2, 3) == 10
            assert rect_perimeter(1, 1) == 4


        def test_circle_area():
            assert math.isclose(circle_area(2), 4 * math.pi)
    '''),
    "tests/test_points.py": src(r'''
        from geometry.points import distance, midpoint, translate


        def test_translate():
            assert translate((1, 2), 3, 0) == (4, 2)
            assert translate((1, 2), 0, 5) == (1, 7)


        def test_distance():
            assert distance((0, 0), (3, 4)) == 5


        def test_midpoint():
            assert midpoint((0, 0), (4, 2)) == (2, 1)
    '''),
}

TASKS.append(dict(
    tier="trivial", n=6, base="geometry",
    bug=[("geometry/shapes.py", "return 2 * (width + height)", "return 4 * (width + height)")],
    statement="`geometry.shapes.rect_perimeter(width, height)` returns twice the perimeter: "
              "`rect_perimeter(2, 3)` returns `20` instead of `10`.",
))
TASKS.append(dict(
    tier="trivial", n=15, base="geometry",
    bug=[("geometry/points.py", "return (x + dx, y + dy)", "return (x + dy, y + dx)")],
    statement="`geometry.points.translate(point, dx, dy)` moves points in the wrong direction: "
              "`translate((1, 2), 3, 0)` returns `(1, 5)` instead of `(4, 2)`. dx should move the point "
              "horizontally and dy vertically.",
))

BASES["mathutil"] = {
    "README.md": "# mathutil\n\nRanges, ratios and integer sequences. Run the tests with `python -m pytest`.\n",
    "mathutil/__init__.py": '"""Ranges, ratios and integer sequences."""\n',
    "mathutil/bounds.py": src(r'''
        """Ranges, ratios and percentages."""


        def in_range(value, low, high):
            """True when low <= value <= high."""
            return low <= value and value <= high


        def clamp(value, low, high):
            """Limit value to the range [low, high]."""
            return max(low, min(value, high))


        def ratio(part, whole):
            """part / whole as a float."""
            return part / whole


        def percent(part, whole):
            """What percentage of whole part is."""
            return ratio(part, whole) * 100


        def normalize(values):
            """Scale values so that they sum to 1."""
            total = sum(values)
            return [value / total for value in values]
    '''),
    "mathutil/series.py": src(r'''
        """Integer sequences."""


        def factorial(n):
            """n! for n >= 0."""
            result = 1
            for i in range(2, n + 1):
                result *= i
            return result


        def fibonacci(n):
            """The first n Fibonacci numbers, starting 0, 1."""
            numbers = []
            a, b = 0, 1
            for _ in range(n):
                numbers.append(a)
                a, b = b, a + b
            return numbers


        def sum_of_squares(n):
            """1**2 + 2**2 + ... + n**2."""
            return sum(i * i for i in range(1, n + 1))
    '''),
    "tests/test_bounds.py": src(r'''
        from mathutil.bounds import clamp, in_range, normalize, percent


        def test_in_range():
            assert in_range(5, 1, 10)
            assert in_range(1, 1, 10)
            assert not in_range(0, 1, 10)
            assert not in_range(11, 1, 10)


        def test_clamp():
            assert clamp(15, 0, 10) == 10
            assert clamp(-3, 0, 10) == 0
            assert clamp(4, 0, 10) == 4


        def test_percent():
            assert percent(1, 4) == 25.0
            assert percent(3, 3) == 100.0


        def test_normalize():
            assert normalize([1, 3]) == [0.25, 0.75]
    '''),
    "tests/test_series.py": src(r'''
        from mathutil.series import factorial, fibonacci, sum_of_squares


        def test_factorial():
            assert factorial(0) == 1
            assert factorial(5) == 120


        def test_fibonacci():
            assert fibonacci(6) == [0, 1, 1, 2, 3, 5]


        def test_sum_of_squares():
            assert sum_of_squares(3) == 14
    '''),
}

TASKS.append(dict(
    tier="trivial", n=7, base="mathutil",
    bug=[("mathutil/bounds.py", "return ratio(part, whole) * 100", "return ratio(whole, part) * 100")],
    statement="`mathutil.bounds.percent(part, whole)` computes the wrong percentage: `percent(1, 4)` returns "
              "`400.0` instead of `25.0`. It should return what percentage of `whole` `part` is.",
))
TASKS.append(dict(
    tier="trivial", n=8, base="mathutil",
    bug=[("mathutil/bounds.py", "    return [value / total for value in values]\n",
          "    [value / total for value in values]\n")],
    statement="`mathutil.bounds.normalize(values)` returns `None`: `normalize([1, 3])` should return "
              "`[0.25, 0.75]` (the values scaled so that they sum to 1).",
))
TASKS.append(dict(
    tier="trivial", n=14, base="mathutil",
    bug=[("mathutil/bounds.py", "return low <= value and value <= high", "return low <= value or value <= high")],
    statement="`mathutil.bounds.in_range(value, low, high)` accepts values outside the range: "
              "`in_range(0, 1, 10)` and `in_range(11, 1, 10)` return `True`. It should be `True` only when "
              "`low <= value <= high`.",
))

BASES["shop"] = {
    "README.md": "# shop\n\nPrices, discounts, tax and a shopping cart. Run the tests with `python -m pytest`.\n",
    "shop/__init__.py": '"""Prices, discounts, tax and a shopping cart."""\n',
    "shop/pricing.py": src(r'''
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
    '''),
    "shop/cart.py": src(r'''
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
    '''),
    "tests/test_pricing.py": src(r'''
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
    '''),
    "tests/test_cart.py": src(r'''
        from shop.cart import cart_total, has_items, item_count

        CART = [("pen", 1.5, 2), ("book", 12.25, 1)]


        def test_cart_total():
            assert cart_total(CART) == 15.25


        def test_item_count():
            assert item_count(CART) == 3


        def test_has_items():
            assert has_items(CART)
            assert not has_items([])
    '''),
}

TASKS.append(dict(
    tier="trivial", n=9, base="shop",
    bug=[("shop/pricing.py", "def round_price(value, digits=2):", "def round_price(value, digits=0):")],
    statement="Prices lose their cents: `shop.pricing.round_price(3.14159)` returns `3.0` instead of `3.14`, "
              "and `cart_total` is rounded to whole euros. By default `round_price` should round to cents "
              "(2 decimal digits).",
))
TASKS.append(dict(
    tier="trivial", n=10, base="shop",
    bug=[("shop/pricing.py", "price * (1 - percent / 100)", "price * (1 + percent / 100)")],
    statement="`shop.pricing.apply_discount(price, percent)` raises the price instead of lowering it: "
              "`apply_discount(100, 15)` returns `115.0` instead of `85.0`.",
))
TASKS.append(dict(
    tier="trivial", n=11, base="shop",
    bug=[("shop/cart.py", "return len(items) != 0", "return len(items) == 0")],
    statement="`shop.cart.has_items(items)` is inverted: it returns `False` for a cart with items and "
              "`True` for an empty cart.",
))

BASES["inventory"] = {
    "README.md": "# inventory\n\nStock levels keyed by item name. Run the tests with `python -m pytest`.\n",
    "inventory/__init__.py": '"""Stock levels keyed by item name."""\n',
    "inventory/names.py": src(r'''
        """Item names are compared without case or surrounding spaces."""


        def normalize(name):
            """Canonical form of an item name."""
            return name.strip().lower()


        def same_item(a, b):
            """True when two names refer to the same item."""
            return normalize(a) == normalize(b)
    '''),
    "inventory/stock.py": src(r'''
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
    '''),
    "tests/test_names.py": src(r'''
        from inventory.names import normalize, same_item


        def test_normalize():
            assert normalize("  Apple ") == "apple"
            assert normalize("Pear\n") == "pear"


        def test_same_item():
            assert same_item("Milk", "milk")
            assert not same_item("milk", "silk")
    '''),
    "tests/test_stock.py": src(r'''
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
    '''),
}

TASKS.append(dict(
    tier="trivial", n=12, base="inventory",
    bug=[("inventory/names.py", "return name.strip().lower()", "return name.lstrip().lower()")],
    statement='`inventory.names.normalize(name)` keeps trailing whitespace: `normalize("Pear\\n")` returns '
              '`"pear\\n"` instead of `"pear"`. Spaces on both sides of a name should be ignored.',
))
TASKS.append(dict(
    tier="trivial", n=13, base="inventory",
    bug=[("inventory/stock.py", "return ranked[:n]", "return ranked[:n - 1]")],
    statement="`inventory.stock.top_items(stock, n=3)` returns one item too few: with the default `n=3` it "
              "returns only two names, and `top_items(stock, n=1)` returns `[]`.",
))

from builtin_tasks_easy import EASY_BASES, EASY_TASKS  # noqa: E402
from builtin_tasks_medium import MEDIUM_BASES, MEDIUM_TASKS  # noqa: E402

BASES.update(EASY_BASES)
BASES.update(MEDIUM_BASES)
TASKS.extend(EASY_TASKS)
TASKS.extend(MEDIUM_TASKS)
