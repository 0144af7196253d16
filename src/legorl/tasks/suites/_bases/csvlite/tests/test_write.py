from csvlite.write import format_row, format_rows


def test_format_row():
    assert format_row(["a", "b,c", None, 3]) == 'a,"b,c",,3'


def test_format_rows():
    assert format_rows([["x", 1], ["y", 2]]) == "x,1\ny,2\n"
