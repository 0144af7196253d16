"""Render blocks to HTML."""

from minimd.blocks import parse_blocks
from minimd.inline import render_inline


def render_block(block):
    kind = block[0]
    if kind == "heading":
        _, level, text = block
        return f"<h{level}>{render_inline(text)}</h{level}>"
    if kind in ("ul", "ol"):
        items = "".join(f"<li>{render_inline(item)}</li>" for item in block[1])
        return f"<{kind}>{items}</{kind}>"
    return f"<p>{render_inline(block[1])}</p>"


def render(text):
    """HTML for markdown text, one line per block."""
    return "\n".join(render_block(b) for b in parse_blocks(text))
