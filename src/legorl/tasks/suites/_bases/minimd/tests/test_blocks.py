from minimd.blocks import parse_blocks


def test_paragraphs():
    assert parse_blocks("one\ntwo\n\nthree") == [("p", "one two"), ("p", "three")]


def test_bullets():
    assert parse_blocks("- a\n* b\ntext") == [("ul", ["a", "b"]), ("p", "text")]
