from urlkit.encode import quote, unquote


def test_quote():
    assert quote("a b&c") == "a%20b%26c"
    assert quote("/path/x", safe="/") == "/path/x"
    assert quote("é") == "%C3%A9"


def test_unquote_ascii():
    assert unquote("a%20b%26c") == "a b&c"
    assert unquote("a+b") == "a+b"
    assert unquote("a+b", plus=True) == "a b"
    assert unquote("100%") == "100%"
