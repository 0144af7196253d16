"""Medium built-in tasks: multi-file fixes, or bugs whose symptom shows up far from their cause."""

from __future__ import annotations

import textwrap


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


MEDIUM_BASES: dict[str, dict[str, str]] = {}
MEDIUM_TASKS: list[dict] = []

# -- ledger ----------------------------------------------------------------------------------------

MEDIUM_BASES["ledger"] = {
    "README.md": src(r'''
        # ledger

        A small bookkeeping library: amounts are integer cents (`ledger.money`), accounts hold
        dated transactions (`ledger.accounts`), bank exports are imported from CSV
        (`ledger.importer`) and balance sheets are printed by `ledger.report`.
        Run the tests with `python -m pytest`.
    '''),
    "ledger/__init__.py": '"""A small bookkeeping library; amounts are integer cents."""\n',
    "ledger/money.py": src(r'''
        """Amounts of money are integer cents."""


        def parse_amount(text):
            """Parse "1,234.50", "-3.2", "$7" or "(12.00)" (accounting style for negative) into cents."""
            s = text.strip().replace(",", "").replace("$", "")
            negative = False
            if s.startswith("(") and s.endswith(")"):
                negative, s = True, s[1:-1].strip()
            if s.startswith("-"):
                negative, s = not negative, s[1:]
            whole, _, frac = s.partition(".")
            if not (whole.isdigit() or (whole == "" and frac.isdigit())):
                raise ValueError(f"not an amount: {text!r}")
            if len(frac) > 2 or (frac and not frac.isdigit()):
                raise ValueError(f"not an amount: {text!r}")
            cents = int(whole or "0") * 100 + int(frac.ljust(2, "0"))
            return -cents if negative else cents


        def format_cents(cents):
            """Format integer cents as "1,234.50"; negative amounts get a leading minus ("-0.05")."""
            sign = "-" if cents < 0 else ""
            whole, frac = divmod(abs(cents), 100)
            return f"{sign}{whole:,}.{frac:02d}"
    '''),
    "ledger/accounts.py": src(r'''
        """Accounts and their transactions."""

        from ledger.money import format_cents


        class Account:
            def __init__(self, name, opening=0):
                self.name = name
                self.opening = opening  # cents
                self.transactions = []  # (ISO date, description, cents)

            def post(self, date, description, cents):
                self.transactions.append((date, description, cents))

            def balance(self, until=None):
                """Balance in cents, counting the transactions dated on or before `until` (an ISO date)."""
                total = self.opening
                for date, _, cents in self.transactions:
                    if until is None or date <= until:
                        total += cents
                return total

            def statement(self):
                """Lines "date  description  amount  running balance", in date order."""
                lines = []
                running = self.opening
                for date, description, cents in sorted(self.transactions, key=lambda t: t[0]):
                    running += cents
                    lines.append(f"{date}  {description:<12}  {format_cents(cents):>10}  {format_cents(running):>10}")
                return lines
    '''),
    "ledger/importer.py": src(r'''
        """Import bank exports: CSV with a "date,description,amount" header; fields may be quoted."""

        import csv

        from ledger.money import parse_amount


        def read_export(text):
            """(date, description, cents) for every data row; the header row and blank lines are skipped."""
            rows = []
            for record in csv.reader(text.splitlines()):
                if not record or record[0].strip().lower() == "date":
                    continue
                date, description, amount = (field.strip() for field in record)
                rows.append((date, description, parse_amount(amount)))
            return rows


        def import_into(account, text):
            """Post every row of a bank export to account; returns the number of rows."""
            rows = read_export(text)
            for date, description, cents in rows:
                account.post(date, description, cents)
            return len(rows)
    '''),
    "ledger/report.py": src(r'''
        """Balance sheets over several accounts."""

        from ledger.money import format_cents


        def balance_sheet(accounts, as_of=None):
            """One line per account (name, balance as of the given ISO date) and a TOTAL line."""
            width = max([len("TOTAL")] + [len(a.name) for a in accounts])
            lines = []
            total = 0
            for account in accounts:
                balance = account.balance(until=as_of)
                total += balance
                lines.append(f"{account.name:<{width}}  {format_cents(balance):>12}")
            lines.append(f"{'TOTAL':<{width}}  {format_cents(total):>12}")
            return "\n".join(lines)
    '''),
    "tests/test_money.py": src(r'''
        import pytest

        from ledger.money import format_cents, parse_amount


        def test_parse_amount():
            assert parse_amount("1,234.50") == 123450
            assert parse_amount("$7") == 700
            assert parse_amount("-3.2") == -320
            assert parse_amount(".5") == 50


        def test_parse_amount_invalid():
            for bad in ["", "abc", "1.234", "1.2.3"]:
                with pytest.raises(ValueError):
                    parse_amount(bad)


        def test_format_cents():
            assert format_cents(123450) == "1,234.50"
            assert format_cents(5) == "0.05"
            assert format_cents(0) == "0.00"
    '''),
    "tests/test_accounts.py": src(r'''
        from ledger.accounts import Account


        def make():
            acc = Account("cash", opening=1000)
            acc.post("2024-01-03", "refund", 250)
            acc.post("2024-01-01", "salary", 5000)
            return acc


        def test_balance():
            acc = make()
            assert acc.balance() == 6250
            assert acc.balance(until="2024-01-02") == 6000


        def test_statement():
            assert make().statement() == [
                "2024-01-01  salary             50.00       60.00",
                "2024-01-03  refund              2.50       62.50",
            ]
    '''),
    "tests/test_importer.py": src(r'''
        from ledger.accounts import Account
        from ledger.importer import import_into, read_export

        EXPORT = "date,description,amount\n2024-02-01,Salary,2500.00\n2024-02-03,Groceries,-54.20\n\n"


        def test_read_export():
            assert read_export(EXPORT) == [("2024-02-01", "Salary", 250000), ("2024-02-03", "Groceries", -5420)]


        def test_import_into():
            acc = Account("bank")
            assert import_into(acc, EXPORT) == 2
            assert acc.balance() == 244580
    '''),
    "tests/test_report.py": src(r'''
        from ledger.accounts import Account
        from ledger.report import balance_sheet


        def test_balance_sheet():
            cash = Account("cash", opening=1000)
            cash.post("2024-01-05", "sale", 2550)
            bank = Account("bank account", opening=100000)
            assert balance_sheet([cash, bank]).splitlines() == [
                "cash                 35.50",
                "bank account      1,000.00",
                "TOTAL             1,035.50",
            ]
    '''),
}

MEDIUM_TASKS.append(dict(
    tier="medium", n=1, base="ledger",
    bug=[("ledger/money.py",
          "    sign = \"-\" if cents < 0 else \"\"\n"
          "    whole, frac = divmod(abs(cents), 100)\n"
          "    return f\"{sign}{whole:,}.{frac:02d}\"\n",
          "    whole, frac = divmod(cents, 100)\n"
          "    return f\"{whole:,}.{frac:02d}\"\n")],
    hidden={
        "tests/test_report.py": src(r'''


            def test_balance_sheet_negative():
                card = Account("card")
                card.post("2024-03-01", "fee", -505)
                assert balance_sheet([card]).splitlines() == [
                    "card          -5.05",
                    "TOTAL         -5.05",
                ]
        '''),
        "tests/test_accounts.py": src(r'''


            def test_statement_overdrawn():
                acc = Account("cash", opening=100)
                acc.post("2024-01-02", "rent", -150050)
                assert acc.statement() == ["2024-01-02  rent           -1,500.50   -1,499.50"]
        '''),
    },
    statement=src(r'''
        Negative amounts are printed wrong in statements and balance sheets

        An account that is overdrawn by 5.05 shows up in `ledger.report.balance_sheet` as

        ```
        card          -6.95
        TOTAL         -6.95
        ```

        and `Account.statement()` has the same problem: a payment of -1,500.50 is printed as
        `-1,501.50`. Every negative amount with non-zero cents is printed wrong; amounts are
        integer cents, so -505 should print as `-5.05` and -150050 as `-1,500.50`.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=2, base="ledger",
    bug=[("ledger/money.py",
          "    if s.startswith(\"(\") and s.endswith(\")\"):\n"
          "        negative, s = True, s[1:-1].strip()\n", "")],
    hidden={"tests/test_importer.py": src(r'''


        def test_import_accounting_negatives():
            export = "date,description,amount\n2024-02-04,Card fee,(12.00)\n2024-02-05,Refund,3.50\n"
            assert read_export(export) == [("2024-02-04", "Card fee", -1200), ("2024-02-05", "Refund", 350)]


        def test_parse_amount_parentheses():
            from ledger.money import parse_amount

            assert parse_amount("(1,250.00)") == -125000
            assert parse_amount("($3)") == -300
    ''')},
    statement=src(r'''
        Importing a bank export fails on amounts in parentheses

        Our bank writes debits accounting-style, in parentheses:

        ```
        date,description,amount
        2024-02-04,Card fee,(12.00)
        ```

        `ledger.importer.read_export(text)` raises `ValueError: not an amount: '(12.00)'`. Such an
        amount should be read as negative (-1200 cents), as `ledger.money` documents; `($3)` is
        -300 cents.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=3, base="ledger",
    bug=[("ledger/accounts.py", "if until is None or date <= until:", "if until is None or date < until:")],
    hidden={"tests/test_report.py": src(r'''


        def test_balance_sheet_as_of_includes_that_day():
            cash = Account("cash", opening=1000)
            cash.post("2024-01-31", "sale", 500)
            cash.post("2024-02-01", "sale", 700)
            assert balance_sheet([cash], as_of="2024-01-31").splitlines() == [
                "cash          15.00",
                "TOTAL         15.00",
            ]
    ''')},
    statement=src(r'''
        Month-end balance sheet leaves out the last day

        `ledger.report.balance_sheet(accounts, as_of="2024-01-31")` does not count the
        transactions dated 2024-01-31 itself, so the month-end report disagrees with the bank. A
        balance "as of" a date must include the transactions of that day.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=4, base="ledger",
    bug=[("ledger/importer.py", "import csv\n\n", ""),
         ("ledger/importer.py",
          "    for record in csv.reader(text.splitlines()):\n"
          "        if not record or record[0].strip().lower() == \"date\":\n",
          "    for line in text.splitlines():\n"
          "        record = line.split(\",\")\n"
          "        if not line.strip() or record[0].strip().lower() == \"date\":\n")],
    hidden={"tests/test_importer.py": src(r'''


        def test_import_quoted_fields():
            export = 'date,description,amount\n2024-02-05,"Rent, February","-1,200.00"\n2024-02-06,Coffee,-3\n'
            assert read_export(export) == [("2024-02-05", "Rent, February", -120000),
                                           ("2024-02-06", "Coffee", -300)]
            acc = Account("bank", opening=200000)
            assert import_into(acc, export) == 2
            assert acc.balance() == 79700
    ''')},
    statement=src(r'''
        Bank export with quoted fields cannot be imported

        Exports that quote fields containing commas, e.g.

        ```
        date,description,amount
        2024-02-05,"Rent, February","-1,200.00"
        ```

        make `ledger.importer.read_export` (and so `import_into`) fail with
        `ValueError: too many values to unpack`. Quoted fields should be read as one field each,
        giving `("2024-02-05", "Rent, February", -120000)`.
    '''),
))

# -- minimd ----------------------------------------------------------------------------------------

MEDIUM_BASES["minimd"] = {
    "README.md": src(r'''
        # minimd

        A very small Markdown to HTML converter: `minimd.blocks` splits text into blocks
        (headings, lists, paragraphs), `minimd.inline` formats `code`, **bold** and *emphasis*,
        `minimd.render.render(text)` puts it together. Run the tests with `python -m pytest`.
    '''),
    "minimd/__init__.py": src(r'''
        """A very small Markdown to HTML converter."""

        from minimd.render import render

        __all__ = ["render"]
    '''),
    "minimd/escape.py": src(r'''
        """HTML escaping."""


        def escape(text):
            """Escape the HTML special characters &, <, > and "."""
            return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                    .replace('"', "&quot;"))
    '''),
    "minimd/blocks.py": src(r'''
        """Split markdown text into blocks."""

        import re

        HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
        BULLET = re.compile(r"^[-*]\s+(.*)$")
        NUMBERED = re.compile(r"^\d+[.)]\s+(.*)$")


        def parse_blocks(text):
            """A list of blocks: ("heading", level, text), ("ul", [items]), ("ol", [items]) or ("p", text).

            Consecutive list items of the same kind form one list; consecutive text lines form one
            paragraph; blank lines separate paragraphs.
            """
            blocks = []
            paragraph = []

            def flush():
                if paragraph:
                    blocks.append(("p", " ".join(paragraph)))
                    paragraph.clear()

            for raw in text.splitlines():
                line = raw.strip()
                if not line:
                    flush()
                    continue
                if m := HEADING.match(line):
                    flush()
                    blocks.append(("heading", len(m.group(1)), m.group(2).strip()))
                elif m := BULLET.match(line):
                    flush()
                    _add_item(blocks, "ul", m.group(1))
                elif m := NUMBERED.match(line):
                    flush()
                    _add_item(blocks, "ol", m.group(1))
                else:
                    paragraph.append(line)
            flush()
            return blocks


        def _add_item(blocks, kind, item):
            if blocks and blocks[-1][0] == kind:
                blocks[-1][1].append(item)
            else:
                blocks.append((kind, [item]))
    '''),
    "minimd/inline.py": src(r'''
        """Inline markup: `code`, **bold**, *emphasis*."""

        import re

        from minimd.escape import escape

        CODE = re.compile(r"`([^`]+)`")
        BOLD = re.compile(r"\*\*(.+?)\*\*")
        EM = re.compile(r"\*(.+?)\*")


        def render_inline(text):
            """Inline HTML for text; the content of code spans is escaped but not otherwise formatted."""
            parts = []
            pos = 0
            for m in CODE.finditer(text):
                parts.append(_format(text[pos:m.start()]))
                parts.append(f"<code>{escape(m.group(1))}</code>")
                pos = m.end()
            parts.append(_format(text[pos:]))
            return "".join(parts)


        def _format(text):
            text = escape(text)
            text = BOLD.sub(r"<strong>\1</strong>", text)
            return EM.sub(r"<em>\1</em>", text)
    '''),
    "minimd/render.py": src(r'''
        """Render blocks to HTML."""

        from minimd.blocks import parse_blocks
        from minimd.inline import render_inline


        def render_block(block):
            kind = block[0]
            if kind == "heading":
                _, level, text = block
                return f"<h{level}>{render_inline(text)}</h{level}>"
            if kind in ("ul", "ol"):
                items = "".join(f"<li>{render_inline(item)}</li>" for item in block[1])
                return f"<{kind}>{items}</{kind}>"
            return f"<p>{render_inline(block[1])}</p>"


        def render(text):
            """HTML for markdown text, one line per block."""
            return "\n".join(render_block(b) for b in parse_blocks(text))
    '''),
    "tests/test_blocks.py": src(r'''
        from minimd.blocks import parse_blocks


        def test_paragraphs():
            assert parse_blocks("one\ntwo\n\nthree") == [("p", "one two"), ("p", "three")]


        def test_bullets():
            assert parse_blocks("- a\n* b\ntext") == [("ul", ["a", "b"]), ("p", "text")]
    '''),
    "tests/test_render.py": src(r'''
        from minimd.render import render


        def test_heading_and_paragraph():
            assert render("# Title\n\nSome *nice* and **bold** text.") == (
                "<h1>Title</h1>\n<p>Some <em>nice</em> and <strong>bold</strong> text.</p>")


        def test_list():
            assert render("- one\n- two") == "<ul><li>one</li><li>two</li></ul>"


        def test_code_span():
            assert render("run `make` now") == "<p>run <code>make</code> now</p>"
    '''),
}

MEDIUM_TASKS.append(dict(
    tier="medium", n=5, base="minimd",
    bug=[("minimd/escape.py",
          "    return (text.replace(\"&\", \"&amp;\").replace(\"<\", \"&lt;\").replace(\">\", \"&gt;\")\n"
          "            .replace('\"', \"&quot;\"))\n",
          "    return (text.replace(\"<\", \"&lt;\").replace(\">\", \"&gt;\").replace('\"', \"&quot;\")\n"
          "            .replace(\"&\", \"&amp;\"))\n")],
    hidden={"tests/test_render.py": src(r'''


        def test_special_characters_are_escaped_once():
            assert render("a < b & c") == "<p>a &lt; b &amp; c</p>"
            assert render("# 1 > 0") == "<h1>1 &gt; 0</h1>"
            assert render("use `<br>` here") == "<p>use <code>&lt;br&gt;</code> here</p>"
    ''')},
    statement=src(r'''
        `<` and `>` show up as `&amp;lt;` / `&amp;gt;` in the HTML

        `minimd.render("a < b")` gives `<p>a &amp;lt; b</p>`, which a browser shows literally as
        "a &lt; b". The same happens in headings and inside code spans (`` `<br>` ``). Expected
        `<p>a &lt; b</p>`; a plain `&` must still become `&amp;`.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=6, base="minimd",
    bug=[("minimd/blocks.py", "NUMBERED = re.compile(r\"^\\d+[.)]\\s+(.*)$\")\n", ""),
         ("minimd/blocks.py", "(\"ul\", [items]), (\"ol\", [items]) or (\"p\", text)",
          "(\"ul\", [items]) or (\"p\", text)"),
         ("minimd/blocks.py",
          "        elif m := NUMBERED.match(line):\n"
          "            flush()\n"
          "            _add_item(blocks, \"ol\", m.group(1))\n", ""),
         ("minimd/render.py", "    if kind in (\"ul\", \"ol\"):\n", "    if kind == \"ul\":\n"),
         ("minimd/render.py", "        return f\"<{kind}>{items}</{kind}>\"\n",
          "        return f\"<ul>{items}</ul>\"\n")],
    hidden={
        "tests/test_blocks.py": src(r'''


            def test_numbered_list():
                assert parse_blocks("1. a\n2) b\n- c") == [("ol", ["a", "b"]), ("ul", ["c"])]
        '''),
        "tests/test_render.py": src(r'''


            def test_ordered_list():
                assert render("1. one\n2. **two**\n\nafter") == (
                    "<ol><li>one</li><li><strong>two</strong></li></ol>\n<p>after</p>")
        '''),
    },
    statement=src(r'''
        Support numbered lists

        Numbered list items (`1. one`, `2) two`) are treated as paragraph text:
        `render("1. one\n2. two")` gives `<p>1. one 2. two</p>`. They should become an ordered
        list, `<ol><li>one</li><li>two</li></ol>`, just like `-`/`*` items become `<ul>`. In
        `parse_blocks` an ordered list should be the block `("ol", [items])`; a numbered item
        right after bullet items (or the other way round) starts a new list.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=7, base="minimd",
    bug=[("minimd/blocks.py", "(\"heading\", len(m.group(1)), m.group(2).strip())", "(\"heading\", m.group(2).strip())"),
         ("minimd/blocks.py", "A list of blocks: (\"heading\", level, text),", "A list of blocks: (\"heading\", text),"),
         ("minimd/render.py",
          "        _, level, text = block\n"
          "        return f\"<h{level}>{render_inline(text)}</h{level}>\"\n",
          "        _, text = block\n"
          "        return f\"<h1>{render_inline(text)}</h1>\"\n")],
    hidden={
        "tests/test_blocks.py": src(r'''


            def test_heading_levels():
                assert parse_blocks("# A\n### B") == [("heading", 1, "A"), ("heading", 3, "B")]
        '''),
        "tests/test_render.py": src(r'''


            def test_heading_levels_render():
                assert render("## Usage\n###### *Tiny*") == "<h2>Usage</h2>\n<h6><em>Tiny</em></h6>"
        '''),
    },
    statement=src(r'''
        Every heading is rendered as <h1>

        `render("## Usage")` gives `<h1>Usage</h1>`; it should be `<h2>Usage</h2>` (one level per
        `#`, up to six). The level is lost already in `parse_blocks`: heading blocks should carry
        it, as `("heading", level, text)`.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=8, base="minimd",
    bug=[("minimd/inline.py",
          "    parts = []\n"
          "    pos = 0\n"
          "    for m in CODE.finditer(text):\n"
          "        parts.append(_format(text[pos:m.start()]))\n"
          "        parts.append(f\"<code>{escape(m.group(1))}</code>\")\n"
          "        pos = m.end()\n"
          "    parts.append(_format(text[pos:]))\n"
          "    return \"\".join(parts)\n",
          "    text = _format(text)\n"
          "    return CODE.sub(r\"<code>\\1</code>\", text)\n")],
    hidden={"tests/test_render.py": src(r'''


        def test_no_formatting_inside_code():
            assert render("use `a*b*c` and `**kw**`") == (
                "<p>use <code>a*b*c</code> and <code>**kw**</code></p>")
            assert render("*x* `*y*`") == "<p><em>x</em> <code>*y*</code></p>"
    ''')},
    statement=src(r'''
        Asterisks inside code spans are turned into emphasis

        ```python
        >>> render("use `a*b*c`")
        '<p>use <code>a<em>b</em>c</code></p>'
        ```

        Text inside backticks is code: it should be HTML-escaped but not formatted, so the
        expected output is `<p>use <code>a*b*c</code></p>` (same for `**bold**` inside code).
    '''),
))

# -- urlkit ----------------------------------------------------------------------------------------

MEDIUM_BASES["urlkit"] = {
    "README.md": src(r'''
        # urlkit

        Percent-encoding (`urlkit.encode`), query strings (`urlkit.query`) and URLs
        (`urlkit.url.split_url` / `join_url`). Run the tests with `python -m pytest`.
    '''),
    "urlkit/__init__.py": '"""Percent-encoding, query strings and URLs."""\n',
    "urlkit/encode.py": src(r'''
        """Percent-encoding (RFC 3986 unreserved characters are kept as they are)."""

        UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


        def quote(text, safe=""):
            """Percent-encode text as UTF-8; characters in safe are kept too."""
            out = []
            for char in text:
                if char in UNRESERVED or char in safe:
                    out.append(char)
                else:
                    out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
            return "".join(out)


        def unquote(text, plus=False):
            """Decode %XX escapes; with plus=True "+" means a space (form encoding)."""
            if plus:
                text = text.replace("+", " ")
            data = bytearray()
            i = 0
            while i < len(text):
                if text[i] == "%" and _is_hex(text[i + 1:i + 3]):
                    data.append(int(text[i + 1:i + 3], 16))
                    i += 3
                else:
                    data.extend(text[i].encode("utf-8"))
                    i += 1
            return data.decode("utf-8", errors="replace")


        def _is_hex(s):
            return len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s)
    '''),
    "urlkit/query.py": src(r'''
        """Query strings."""

        from urlkit.encode import quote, unquote


        def parse_qs(query):
            """{key: [values]} of a query string ("a=1&b=2&a=3"); a leading "?" is ignored."""
            result = {}
            for pair in query.lstrip("?").split("&"):
                if not pair:
                    continue
                key, _, value = pair.partition("=")
                result.setdefault(unquote(key, plus=True), []).append(unquote(value, plus=True))
            return result


        def build_qs(params):
            """Inverse of parse_qs: values may be a string or a list of strings; keys keep their order."""
            pairs = []
            for key, values in params.items():
                if isinstance(values, str):
                    values = [values]
                for value in values:
                    pairs.append(f"{quote(key)}={quote(value)}")
            return "&".join(pairs)
    '''),
    "urlkit/url.py": src(r'''
        """Split and join URLs: scheme://host[:port]/path?query#fragment."""

        from urlkit.encode import quote, unquote
        from urlkit.query import build_qs, parse_qs


        class URL:
            def __init__(self, scheme, host, port=None, path="/", query=None, fragment=""):
                self.scheme = scheme
                self.host = host
                self.port = port
                self.path = path  # decoded
                self.query = query or {}  # as parse_qs returns it
                self.fragment = fragment  # decoded

            def __eq__(self, other):
                return isinstance(other, URL) and vars(self) == vars(other)

            def __repr__(self):
                return f"URL({vars(self)!r})"


        def split_url(text):
            scheme, sep, rest = text.partition("://")
            if not sep:
                raise ValueError(f"no scheme in {text!r}")
            rest, _, fragment = rest.partition("#")
            rest, _, query = rest.partition("?")
            netloc, _, path = rest.partition("/")
            host, colon, port = netloc.partition(":")
            return URL(scheme.lower(), host.lower(), int(port) if colon else None, unquote("/" + path),
                       parse_qs(query), unquote(fragment))


        def join_url(url):
            netloc = url.host if url.port is None else f"{url.host}:{url.port}"
            text = f"{url.scheme}://{netloc}{quote(url.path, safe='/')}"
            if url.query:
                text += "?" + build_qs(url.query)
            if url.fragment:
                text += "#" + quote(url.fragment)
            return text
    '''),
    "tests/test_encode.py": src(r'''
        from urlkit.encode import quote, unquote


        def test_quote():
            assert quote("a b&c") == "a%20b%26c"
            assert quote("/path/x", safe="/") == "/path/x"
            assert quote("é") == "%C3%A9"


        def test_unquote_ascii():
            assert unquote("a%20b%26c") == "a b&c"
            assert unquote("a+b") == "a+b"
            assert unquote("a+b", plus=True) == "a b"
            assert unquote("100%") == "100%"
    '''),
    "tests/test_query.py": src(r'''
        from urlkit.query import build_qs, parse_qs


        def test_parse_qs():
            assert parse_qs("?a=1&b=two+words&c=") == {"a": ["1"], "b": ["two words"], "c": [""]}
            assert parse_qs("") == {}


        def test_build_qs():
            assert build_qs({"q": "a b", "n": ["1"]}) == "q=a%20b&n=1"
    '''),
    "tests/test_url.py": src(r'''
        from urlkit.url import URL, join_url, split_url


        def test_split_url():
            url = split_url("HTTPS://Example.com:8080/a%20b/c?x=1&y=2#top")
            assert url == URL("https", "example.com", 8080, "/a b/c", {"x": ["1"], "y": ["2"]}, "top")


        def test_split_minimal():
            assert split_url("http://h") == URL("http", "h", None, "/", {}, "")


        def test_join_url():
            url = URL("https", "example.com", None, "/a b", {"q": ["x"]}, "sec")
            assert join_url(url) == "https://example.com/a%20b?q=x#sec"
    '''),
}

MEDIUM_TASKS.append(dict(
    tier="medium", n=9, base="urlkit",
    bug=[("urlkit/encode.py",
          "    data = bytearray()\n"
          "    i = 0\n"
          "    while i < len(text):\n"
          "        if text[i] == \"%\" and _is_hex(text[i + 1:i + 3]):\n"
          "            data.append(int(text[i + 1:i + 3], 16))\n"
          "            i += 3\n"
          "        else:\n"
          "            data.extend(text[i].encode(\"utf-8\"))\n"
          "            i += 1\n"
          "    return data.decode(\"utf-8\", errors=\"replace\")\n",
          "    out = []\n"
          "    i = 0\n"
          "    while i < len(text):\n"
          "        if text[i] == \"%\" and _is_hex(text[i + 1:i + 3]):\n"
          "            out.append(chr(int(text[i + 1:i + 3], 16)))\n"
          "            i += 3\n"
          "        else:\n"
          "            out.append(text[i])\n"
          "            i += 1\n"
          "    return \"\".join(out)\n")],
    hidden={
        "tests/test_query.py": src(r'''


            def test_parse_qs_utf8():
                assert parse_qs("city=K%C3%B6ln&q=caf%C3%A9+au+lait") == {"city": ["Köln"], "q": ["café au lait"]}
                assert parse_qs(build_qs({"name": "Zoë"})) == {"name": ["Zoë"]}
        '''),
        "tests/test_url.py": src(r'''


            def test_split_url_utf8_path():
                url = split_url("http://h/%E2%82%AC/men%C3%BC#%C3%BC")
                assert url.path == "/€/menü"
                assert url.fragment == "ü"
                assert split_url(join_url(url)) == url
        '''),
    },
    statement=src(r'''
        Non-ASCII characters are garbled when URLs and query strings are decoded

        ```python
        >>> parse_qs("city=K%C3%B6ln")
        {'city': ['KÃ¶ln']}
        >>> split_url("http://h/men%C3%BC").path
        '/menÃ¼'
        ```

        Percent-escapes encode UTF-8 bytes (that is how `quote` writes them), so the expected
        values are `'Köln'` and `'/menü'`; `split_url(join_url(url))` should give back `url`.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=10, base="urlkit",
    bug=[("urlkit/query.py",
          "        result.setdefault(unquote(key, plus=True), []).append(unquote(value, plus=True))\n",
          "        result[unquote(key, plus=True)] = [unquote(value, plus=True)]\n"),
         ("urlkit/query.py",
          "        if isinstance(values, str):\n"
          "            values = [values]\n"
          "        for value in values:\n"
          "            pairs.append(f\"{quote(key)}={quote(value)}\")\n",
          "        value = values if isinstance(values, str) else values[0]\n"
          "        pairs.append(f\"{quote(key)}={quote(value)}\")\n")],
    hidden={
        "tests/test_query.py": src(r'''


            def test_repeated_keys():
                assert parse_qs("tag=a&x=1&tag=b") == {"tag": ["a", "b"], "x": ["1"]}
                assert build_qs({"tag": ["a", "b"], "x": "1"}) == "tag=a&tag=b&x=1"
        '''),
        "tests/test_url.py": src(r'''


            def test_url_round_trip_repeated_keys():
                text = "http://h/s?tag=a&tag=b%20c"
                assert split_url(text).query == {"tag": ["a", "b c"]}
                assert join_url(split_url(text)) == text
        '''),
    },
    statement=src(r'''
        Repeated query parameters are lost

        `parse_qs("tag=a&tag=b")` returns `{"tag": ["b"]}` although values are lists precisely
        so that a key can repeat; expected `{"tag": ["a", "b"]}`. The other direction drops them
        too: `build_qs({"tag": ["a", "b"]})` gives `"tag=a"` instead of `"tag=a&tag=b"`, so
        `join_url(split_url(url))` does not give back a URL like `http://h/s?tag=a&tag=b`.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=11, base="urlkit",
    bug=[("urlkit/url.py",
          "    rest, _, fragment = rest.partition(\"#\")\n"
          "    rest, _, query = rest.partition(\"?\")\n",
          "    rest, _, query = rest.partition(\"?\")\n"
          "    query, _, fragment = query.partition(\"#\")\n")],
    hidden={"tests/test_url.py": src(r'''


        def test_fragment_without_query():
            assert split_url("http://h/doc#intro") == URL("http", "h", None, "/doc", {}, "intro")
            assert split_url("http://h/doc#see?x=1") == URL("http", "h", None, "/doc", {}, "see?x=1")
            assert split_url("http://h/#a") == URL("http", "h", None, "/", {}, "a")
    ''')},
    statement=src(r'''
        split_url mixes up fragments and paths

        `split_url("http://h/doc#intro")` returns a URL whose path is `"/doc#intro"` and whose
        fragment is empty; with `http://h/doc#see?x=1` the "query" `x=1` is even taken from the
        fragment. Everything after the first `#` is the fragment, and only a `?` before it
        starts the query: expected path `/doc`, fragment `intro` (and `see?x=1`), no query.
    '''),
))

# -- depgraph --------------------------------------------------------------------------------------

MEDIUM_BASES["depgraph"] = {
    "README.md": src(r'''
        # depgraph

        Dependency graphs: build order (`depgraph.order`), cycle detection (`depgraph.cycles`),
        parallel build layers (`depgraph.layers`) and what to rebuild after a change
        (`depgraph.impact`). Run the tests with `python -m pytest`.
    '''),
    "depgraph/__init__.py": '"""Dependency graphs."""\n',
    "depgraph/graph.py": src(r'''
        """A directed graph of dependencies: an edge a -> b means "a depends on b"."""


        class Graph:
            def __init__(self):
                self._deps = {}

            def add_node(self, node):
                self._deps.setdefault(node, set())

            def add_edge(self, node, dependency):
                self.add_node(node)
                self.add_node(dependency)
                self._deps[node].add(dependency)

            def nodes(self):
                return sorted(self._deps)

            def dependencies(self, node):
                return sorted(self._deps[node])

            def dependents(self, node):
                return sorted(n for n, deps in self._deps.items() if node in deps)
    '''),
    "depgraph/cycles.py": src(r'''
        """Cycle detection."""


        def find_cycle(graph):
            """A cycle as a list of nodes [a, b, ..., a], or None; searches from the nodes in sorted order."""
            white, grey, black = 0, 1, 2
            color = {node: white for node in graph.nodes()}
            stack = []

            def visit(node):
                color[node] = grey
                stack.append(node)
                for dep in graph.dependencies(node):
                    if color[dep] == grey:
                        return stack[stack.index(dep):] + [dep]
                    if color[dep] == white:
                        found = visit(dep)
                        if found:
                            return found
                stack.pop()
                color[node] = black
                return None

            for node in graph.nodes():
                if color[node] == white:
                    found = visit(node)
                    if found:
                        return found
            return None
    '''),
    "depgraph/order.py": src(r'''
        """Build order: dependencies first."""

        from depgraph.cycles import find_cycle


        class CycleError(ValueError):
            def __init__(self, cycle):
                super().__init__("dependency cycle: " + " -> ".join(cycle))
                self.cycle = cycle


        def build_order(graph):
            """Every node after its dependencies; among ready nodes, alphabetical (Kahn's algorithm).

            Raises CycleError naming a cycle when there is one.
            """
            remaining = {node: set(graph.dependencies(node)) for node in graph.nodes()}
            order = []
            while remaining:
                ready = sorted(node for node, deps in remaining.items() if not deps)
                if not ready:
                    raise CycleError(find_cycle(graph))
                node = ready[0]
                order.append(node)
                del remaining[node]
                for deps in remaining.values():
                    deps.discard(node)
            return order
    '''),
    "depgraph/layers.py": src(r'''
        """Group nodes into layers that can be built in parallel."""

        from depgraph.order import build_order


        def layers(graph):
            """Layer 0: nodes without dependencies; layer k: nodes whose deepest dependency is in layer k-1."""
            depth = {}
            for node in build_order(graph):
                depth[node] = 1 + max((depth[d] for d in graph.dependencies(node)), default=-1)
            result = [[] for _ in range(max(depth.values(), default=-1) + 1)]
            for node in sorted(depth):
                result[depth[node]].append(node)
            return result
    '''),
    "depgraph/impact.py": src(r'''
        """What must be rebuilt when a node changes."""

        from depgraph.order import build_order


        def affected(graph, node):
            """Every node that depends on node, directly or transitively, in build order."""
            seen = set()
            todo = [node]
            while todo:
                current = todo.pop()
                for dependent in graph.dependents(current):
                    if dependent not in seen:
                        seen.add(dependent)
                        todo.append(dependent)
            return [n for n in build_order(graph) if n in seen]
    '''),
    "tests/test_graph.py": src(r'''
        from depgraph.graph import Graph


        def test_nodes_and_edges():
            g = Graph()
            g.add_edge("app", "lib")
            g.add_edge("app", "utils")
            g.add_edge("lib", "utils")
            assert g.nodes() == ["app", "lib", "utils"]
            assert g.dependencies("app") == ["lib", "utils"]
            assert g.dependents("utils") == ["app", "lib"]
    '''),
    "tests/test_order.py": src(r'''
        import pytest

        from depgraph.graph import Graph
        from depgraph.order import CycleError, build_order


        def test_build_order():
            g = Graph()
            g.add_edge("app", "lib")
            g.add_edge("lib", "core")
            g.add_edge("tests", "app")
            g.add_node("docs")
            assert build_order(g) == ["core", "docs", "lib", "app", "tests"]


        def test_cycle_raises():
            g = Graph()
            g.add_edge("a", "b")
            g.add_edge("b", "a")
            with pytest.raises(CycleError):
                build_order(g)
    '''),
    "tests/test_layers.py": src(r'''
        from depgraph.graph import Graph
        from depgraph.impact import affected
        from depgraph.layers import layers


        def test_layers_simple():
            g = Graph()
            g.add_edge("a", "base")
            g.add_edge("b", "base")
            g.add_node("solo")
            assert layers(g) == [["base", "solo"], ["a", "b"]]


        def test_affected_direct():
            g = Graph()
            g.add_edge("app", "lib")
            g.add_edge("tests", "lib")
            assert affected(g, "lib") == ["app", "tests"]
            assert affected(g, "app") == []
    '''),
}

MEDIUM_TASKS.append(dict(
    tier="medium", n=12, base="depgraph",
    bug=[("depgraph/order.py", "from depgraph.cycles import find_cycle\n\n\n", "\n"),
         ("depgraph/order.py", "raise CycleError(find_cycle(graph))", "raise CycleError(sorted(remaining))")],
    hidden={"tests/test_order.py": src(r'''


        def test_cycle_error_names_the_cycle():
            g = Graph()
            g.add_edge("app", "lib")
            g.add_edge("lib", "core")
            g.add_edge("core", "lib")
            g.add_edge("docs", "app")
            with pytest.raises(CycleError) as info:
                build_order(g)
            assert info.value.cycle == ["lib", "core", "lib"]
            assert str(info.value) == "dependency cycle: lib -> core -> lib"
    ''')},
    statement=src(r'''
        CycleError does not say which nodes form the cycle

        With `app -> lib -> core -> lib` and `docs -> app`, `build_order` raises
        `CycleError: dependency cycle: app -> core -> docs -> lib`: that is every node not yet
        built, in alphabetical order, and it is not a cycle at all. The error should name an
        actual cycle, starting and ending at the same node, the way the project's cycle detection
        reports cycles: `dependency cycle: lib -> core -> lib` (`error.cycle` is the list).
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=13, base="depgraph",
    bug=[("depgraph/layers.py", "depth[node] = 1 + max(", "depth[node] = 1 + min(")],
    hidden={"tests/test_layers.py": src(r'''


        def test_layers_uneven_dependencies():
            g = Graph()
            g.add_edge("app", "lib")
            g.add_edge("lib", "core")
            g.add_edge("app", "core")
            assert layers(g) == [["core"], ["lib"], ["app"]]
    ''')},
    statement=src(r'''
        layers() puts a node in the same layer as one of its dependencies

        With `app -> lib -> core` and `app -> core`, `depgraph.layers.layers(g)` returns
        `[["core"], ["app", "lib"]]`, so a parallel build would start `app` before `lib` is
        done. Expected `[["core"], ["lib"], ["app"]]`: a node belongs one layer after its
        deepest dependency.
    '''),
))
MEDIUM_TASKS.append(dict(
    tier="medium", n=14, base="depgraph",
    bug=[("depgraph/impact.py", "                todo.append(dependent)\n", "")],
    hidden={"tests/test_layers.py": src(r'''


        def test_affected_transitive():
            g = Graph()
            g.add_edge("lib", "core")
            g.add_edge("app", "lib")
            g.add_edge("tests", "app")
            g.add_edge("docs", "readme")
            assert affected(g, "core") == ["lib", "app", "tests"]
    ''')},
    statement=src(r'''
        affected() only reports direct dependents

        With `tests -> app -> lib -> core`, changing `core` requires rebuilding `lib`, `app` and
        `tests`, but `depgraph.impact.affected(g, "core")` returns only `["lib"]`. It should return
        every node that depends on the changed one directly or through other nodes, in build
        order: `["lib", "app", "tests"]`.
    '''),
))
