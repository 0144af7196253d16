"""Split and join URLs: scheme://host[:port]/path?query#fragment."""

from urlkit.encode import quote, unquote
from urlkit.query import build_qs, parse_qs


class URL:
    def __init__(self, scheme, host, port=None, path="/", query=None, fragment=""):
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path  # decoded
        self.query = query or {}  # as parse_qs returns it
        self.fragment = fragment  # decoded

    def __eq__(self, other):
        return isinstance(other, URL) and vars(self) == vars(other)

    def __repr__(self):
        return f"URL({vars(self)!r})"


def split_url(text):
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ValueError(f"no scheme in {text!r}")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    host, colon, port = netloc.partition(":")
    return URL(scheme.lower(), host.lower(), int(port) if colon else None, unquote("/" + path),
               parse_qs(query), unquote(fragment))


def join_url(url):
    netloc = url.host if url.port is None else f"{url.host}:{url.port}"
    text = f"{url.scheme}://{netloc}{quote(url.path, safe='/')}"
    if url.query:
        text += "?" + build_qs(url.query)
    if url.fragment:
        text += "#" + quote(url.fragment)
    return text
