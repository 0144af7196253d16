from iniparse.reader import parse
from iniparse.values import get, get_bool, get_int, get_list

DATA = parse("""
debug = no
[app]
workers = 4
verbose = true
plugins = auth, cache ,logs
""")


def test_get_with_default_section():
    assert get(DATA, "app", "workers") == "4"
    assert get(DATA, "app", "debug") == "no"
    assert get(DATA, "app", "missing", "x") == "x"


def test_typed_values():
    assert get_int(DATA, "app", "workers") == 4
    assert get_bool(DATA, "app", "verbose") is True
    assert get_bool(DATA, "app", "debug") is False
    assert get_list(DATA, "app", "plugins") == ["auth", "cache", "logs"]
