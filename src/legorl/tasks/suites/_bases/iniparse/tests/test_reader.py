import pytest

from iniparse.reader import ParseError, parse

TEXT = """
# global settings
name = demo

[server]
Host = example.org
port = 8080
; a comment
"""


def test_parse_sections():
    data = parse(TEXT)
    assert data["DEFAULT"] == {"name": "demo"}
    assert data["server"] == {"host": "example.org", "port": "8080"}


def test_parse_errors():
    with pytest.raises(ParseError, match="line 1"):
        parse("[broken")
    with pytest.raises(ParseError, match="line 2"):
        parse("[a]\njust words")
