"""Turn CSV strings into Python values."""


def coerce(value):
    """"" -> None, "true"/"false" -> bool, numbers -> int or float; other text is returned unchanged."""
    text = value.strip()
    if text == "":
        return None
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if text.isdigit():
        return int(text)
    if text.replace(".", "", 1).isdigit():
        return float(text)
    return value
