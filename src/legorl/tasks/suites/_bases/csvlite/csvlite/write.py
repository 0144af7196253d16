"""Write rows back to CSV text."""


def quote_field(value, sep=","):
    """A field as CSV text: quoted when it holds the separator, a quote or a newline; None -> ""."""
    if value is None:
        return ""
    text = str(value)
    if sep in text or '"' in text or "\n" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def format_row(values, sep=","):
    return sep.join(quote_field(v, sep) for v in values)


def format_rows(rows, sep=","):
    return "\n".join(format_row(row, sep) for row in rows) + "\n"
