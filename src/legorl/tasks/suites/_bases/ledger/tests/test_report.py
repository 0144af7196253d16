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
