from minimd.render import render


def test_heading_and_paragraph():
    assert render("# Title\n\nSome *nice* and **bold** text.") == (
        "<h1>Title</h1>\n<p>Some <em>nice</em> and <strong>bold</strong> text.</p>")


def test_list():
    assert render("- one\n- two") == "<ul><li>one</li><li>two</li></ul>"


def test_code_span():
    assert render("run `make` now") == "<p>run <code>make</code> now</p>"
