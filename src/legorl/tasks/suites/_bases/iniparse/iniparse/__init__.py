"""Read INI files into nested dicts."""

from iniparse.reader import ParseError, parse
from iniparse.values import get, get_bool, get_int, get_list

__all__ = ["ParseError", "parse", "get", "get_bool", "get_int", "get_list"]
