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
