"""Read INI text into {section: {key: value}}."""


class ParseError(ValueError):
    def __init__(self, lineno, message):
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


def parse(text):
    """Sections in [brackets]; `key = value` pairs; `#` and `;` start comment lines.

    Keys before the first section go into the "DEFAULT" section. Keys are lower-cased and
    values stripped; a value may itself contain "=".
    """
    data = {"DEFAULT": {}}
    section = data["DEFAULT"]
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ParseError(lineno, f"unterminated section header {line!r}")
            section = data.setdefault(line[1:-1].strip(), {})
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ParseError(lineno, f"expected 'key = value', got {line!r}")
        section[key.strip().lower()] = value.strip()
    return data
