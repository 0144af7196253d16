from textkit.case import shout, snake_to_camel, title_words


def test_shout():
    assert shout("hi") == "HI!"
    assert shout("Stop") == "STOP!"


def test_title_words():
    assert title_words("hello big world") == "Hello Big World"


def test_snake_to_camel():
    assert snake_to_camel("max_line_length") == "maxLineLength"
    assert snake_to_camel("name") == "name"
