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
