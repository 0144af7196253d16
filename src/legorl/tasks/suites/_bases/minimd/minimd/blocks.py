"""Split markdown text into blocks."""

import re

HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
BULLET = re.compile(r"^[-*]\s+(.*)$")
NUMBERED = re.compile(r"^\d+[.)]\s+(.*)$")


def parse_blocks(text):
    """A list of blocks: ("heading", level, text), ("ul", [items]), ("ol", [items]) or ("p", text).

    Consecutive list items of the same kind form one list; consecutive text lines form one
    paragraph; blank lines separate paragraphs.
    """
    blocks = []
    paragraph = []

    def flush():
        if paragraph:
            blocks.append(("p", " ".join(paragraph)))
            paragraph.clear()

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            flush()
            continue
        if m := HEADING.match(line):
            flush()
            blocks.append(("heading", len(m.group(1)), m.group(2).strip()))
        elif m := BULLET.match(line):
            flush()
            _add_item(blocks, "ul", m.group(1))
        elif m := NUMBERED.match(line):
            flush()
            _add_item(blocks, "ol", m.group(1))
        else:
            paragraph.append(line)
    flush()
    return blocks


def _add_item(blocks, kind, item):
    if blocks and blocks[-1][0] == kind:
        blocks[-1][1].append(item)
    else:
        blocks.append((kind, [item]))
