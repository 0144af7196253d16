"""Percent-encoding (RFC 3986 unreserved characters are kept as they are)."""

UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def quote(text, safe=""):
    """Percent-encode text as UTF-8; characters in safe are kept too."""
    out = []
    for char in text:
        if char in UNRESERVED or char in safe:
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


def unquote(text, plus=False):
    """Decode %XX escapes; with plus=True "+" means a space (form encoding)."""
    if plus:
        text = text.replace("+", " ")
    data = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%" and _is_hex(text[i + 1:i + 3]):
            data.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            data.extend(text[i].encode("utf-8"))
            i += 1
    return data.decode("utf-8", errors="replace")


def _is_hex(s):
    return len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s)
