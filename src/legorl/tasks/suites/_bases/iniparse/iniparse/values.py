"""Typed access to parsed INI values."""

TRUE = {"1", "yes", "true", "on"}
FALSE = {"0", "no", "false", "off"}


def get(data, section, key, default=None):
    """A value from section, else from DEFAULT, else default; keys are case-insensitive."""
    key = key.lower()
    if key in data.get(section, {}):
        return data[section][key]
    return data.get("DEFAULT", {}).get(key, default)


def get_bool(data, section, key, default=False):
    """yes/no, true/false, on/off, 1/0 in any letter case."""
    value = get(data, section, key)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise ValueError(f"[{section}] {key}: not a boolean: {value!r}")


def get_int(data, section, key, default=0):
    value = get(data, section, key)
    return default if value is None else int(value)


def get_list(data, section, key, sep=","):
    """Comma-separated values, stripped; empty items are dropped."""
    value = get(data, section, key)
    if value is None:
        return []
    return [item.strip() for item in value.split(sep) if item.strip()]
