from urlkit.query import build_qs, parse_qs


def test_parse_qs():
    assert parse_qs("?a=1&b=two+words&c=") == {"a": ["1"], "b": ["two words"], "c": [""]}
    assert parse_qs("") == {}


def test_build_qs():
    assert build_qs({"q": "a b", "n": ["1"]}) == "q=a%20b&n=1"
