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
