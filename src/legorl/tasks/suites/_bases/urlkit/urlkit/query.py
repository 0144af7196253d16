"""Query strings."""

from urlkit.encode import quote, unquote


def parse_qs(query):
    """{key: [values]} of a query string ("a=1&b=2&a=3"); a leading "?" is ignored."""
    result = {}
    for pair in query.lstrip("?").split("&"):
        if not pair:
            continue
        key, _, value = pair.partition("=")
        result.setdefault(unquote(key, plus=True), []).append(unquote(value, plus=True))
    return result


def build_qs(params):
    """Inverse of parse_qs: values may be a string or a list of strings; keys keep their order."""
    pairs = []
    for key, values in params.items():
        if isinstance(values, str):
            values = [values]
        for value in values:
            pairs.append(f"{quote(key)}={quote(value)}")
    return "&".join(pairs)
