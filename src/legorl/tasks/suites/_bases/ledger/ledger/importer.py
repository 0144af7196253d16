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
