from csvlite.parse import parse_records, parse_rows, split_line


def test_split_simple():
    assert split_line("a,b,c") == ["a", "b", "c"]
    assert split_line("a;b", sep=";") == ["a", "b"]


def test_split_quoted_separator():
    assert split_line('x,"1,5",y') == ["x", "1,5", "y"]


def test_parse_rows_skips_blank_lines():
    assert parse_rows("a,b\n\n1,2\n") == [["a", "b"], ["1", "2"]]


def test_parse_records():
    text = "name,age\nann,31\nbob,27\n"
    assert parse_records(text) == [{"name": "ann", "age": "31"}, {"name": "bob", "age": "27"}]
    assert parse_records(text, convert=True)[0] == {"name": "ann", "age": 31}
