"""Inline markup: `code`, **bold**, *emphasis*."""

import re

from minimd.escape import escape

CODE = re.compile(r"`([^`]+)`")
BOLD = re.compile(r"\*\*(.+?)\*\*")
EM = re.compile(r"\*(.+?)\*")


def render_inline(text):
    """Inline HTML for text; the content of code spans is escaped but not otherwise formatted."""
    parts = []
    pos = 0
    for m in CODE.finditer(text):
        parts.append(_format(text[pos:m.start()]))
        parts.append(f"<code>{escape(m.group(1))}</code>")
        pos = m.end()
    parts.append(_format(text[pos:]))
    return "".join(parts)


def _format(text):
    text = escape(text)
    text = BOLD.sub(r"<strong>\1</strong>", text)
    return EM.sub(r"<em>\1</em>", text)
