"""Turn CSV strings into Python values."""


def coerce(value):
    """"" -> None, "true"/"false" -> bool, numbers -> int or float; other text is returned unchanged."""
    text = value.strip()
    if text == "":
        return None
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return value
