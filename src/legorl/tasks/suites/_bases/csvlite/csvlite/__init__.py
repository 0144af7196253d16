"""A tiny CSV reader and writer."""

from csvlite.parse import parse_records, parse_rows, split_line
from csvlite.types import coerce
from csvlite.write import format_row, format_rows, quote_field

__all__ = ["parse_records", "parse_rows", "split_line", "coerce", "format_row", "format_rows",
           "quote_field"]
