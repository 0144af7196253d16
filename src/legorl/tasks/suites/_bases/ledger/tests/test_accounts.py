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
