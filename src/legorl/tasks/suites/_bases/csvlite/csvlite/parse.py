"""Parse CSV text (comma separated, double-quoted fields)."""

from csvlite.types import coerce


def split_line(line, sep=","):
    """Split one CSV line into fields; quoted fields may hold the separator and "" for a quote."""
    fields = []
    current = []
    in_quotes = False
    i = 0
    while i < len(line):
        char = line[i]
        if in_quotes:
            if char == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    current.append('"')
                    i += 1
                else:
                    in_quotes = False
            else:
                current.append(char)
        elif char == '"':
            in_quotes = True
        elif char == sep:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    fields.append("".join(current))
    return fields


def parse_rows(text, sep=","):
    """Parse text into a list of rows (lists of strings); blank lines are skipped."""
    return [split_line(line, sep) for line in text.splitlines() if line.strip()]


def parse_records(text, sep=",", convert=False):
    """Parse text whose first row is a header into a list of dicts.

    Rows shorter than the header get "" for the missing fields; with convert=True every
    value goes through csvlite.types.coerce.
    """
    rows = parse_rows(text, sep)
    if not rows:
        return []
    header, body = rows[0], rows[1:]
    records = []
    for row in body:
        row = row + [""] * (len(header) - len(row))
        values = [coerce(v) for v in row] if convert else row
        records.append(dict(zip(header, values)))
    return records
