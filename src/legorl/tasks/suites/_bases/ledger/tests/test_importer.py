from ledger.accounts import Account
from ledger.importer import import_into, read_export

EXPORT = "date,description,amount\n2024-02-01,Salary,2500.00\n2024-02-03,Groceries,-54.20\n\n"


def test_read_export():
    assert read_export(EXPORT) == [("2024-02-01", "Salary", 250000), ("2024-02-03", "Groceries", -5420)]


def test_import_into():
    acc = Account("bank")
    assert import_into(acc, EXPORT) == 2
    assert acc.balance() == 244580
