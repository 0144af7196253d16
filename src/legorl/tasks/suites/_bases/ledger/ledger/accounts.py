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
