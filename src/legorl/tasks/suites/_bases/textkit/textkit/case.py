"""Changing the case of words."""


def shout(text):
    """Return the text in upper case followed by an exclamation mark."""
    return text.upper() + "!"


def title_words(text):
    """Capitalize the first letter of every word."""
    return " ".join(word.capitalize() for word in text.split())


def snake_to_camel(name):
    """Turn snake_case into camelCase."""
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)
