"""Easy built-in tasks: one function, a few lines; failing tests hidden in the test_patch."""

from __future__ import annotations

import textwrap


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


EASY_BASES: dict[str, dict[str, str]] = {}
EASY_TASKS: list[dict] = []

# -- csvlite ---------------------------------------------------------------------------------------

EASY_BASES["csvlite"] = {
    "README.md": src(r'''
        # csvlite

        A tiny CSV reader and writer: `parse_rows`, `parse_records` (header row -> dicts, optional
        type conversion with `coerce`), `format_rows`. Run the tests with `python -m pytest`.
    '''),
    "csvlite/__init__.py": src(r'''
        """A tiny CSV reader and writer."""

        from csvlite.parse import parse_records, parse_rows, split_line
        from csvlite.types import coerce
        from csvlite.write import format_row, format_rows, quote_field

        __all__ = ["parse_records", "parse_rows", "split_line", "coerce", "format_row", "format_rows",
                   "quote_field"]
    '''),
    "csvlite/parse.py": src(r'''
        """Parse CSV text (comma separated, double-quoted fields)."""

        from csvlite.types import coerce


        def split_line(line, sep=","):
            """Split one CSV line into fields; quoted fields may hold the separator and "" for a quote."""
            fields = []
            current = []
            in_quotes = False
            i = 0
            while i < len(line):
                char = line[i]
                if in_quotes:
                    if char == '"':
                        if i + 1 < len(line) and line[i + 1] == '"':
                            current.append('"')
                            i += 1
                        else:
                            in_quotes = False
                    else:
                        current.append(char)
                elif char == '"':
                    in_quotes = True
                elif char == sep:
                    fields.append("".join(current))
                    current = []
                else:
                    current.append(char)
                i += 1
            fields.append("".join(current))
            return fields


        def parse_rows(text, sep=","):
            """Parse text into a list of rows (lists of strings); blank lines are skipped."""
            return [split_line(line, sep) for line in text.splitlines() if line.strip()]


        def parse_records(text, sep=",", convert=False):
            """Parse text whose first row is a header into a list of dicts.

            Rows shorter than the header get "" for the missing fields; with convert=True every
            value goes through csvlite.types.coerce.
            """
            rows = parse_rows(text, sep)
            if not rows:
                return []
            header, body = rows[0], rows[1:]
            records = []
            for row in body:
                row = row + [""] * (len(header) - len(row))
                values = [coerce(v) for v in row] if convert else row
                records.append(dict(zip(header, values)))
            return records
    '''),
    "csvlite/types.py": src(r'''
        """Turn CSV strings into Python values."""


        def coerce(value):
            """"" -> None, "true"/"false" -> bool, numbers -> int or float; other text is returned unchanged."""
            text = value.strip()
            if text == "":
                return None
            lowered = text.lower()
            if lowered in ("true", "false"):
                return lowered == "true"
            try:
                return int(text)
            except ValueError:
                pass
            try:
                return float(text)
            except ValueError:
                return value
    '''),
    "csvlite/write.py": src(r'''
        """Write rows back to CSV text."""


        def quote_field(value, sep=","):
            """A field as CSV text: quoted when it holds the separator, a quote or a newline; None -> ""."""
            if value is None:
                return ""
            text = str(value)
            if sep in text or '"' in text or "\n" in text:
                return '"' + text.replace('"', '""') + '"'
            return text


        def format_row(values, sep=","):
            return sep.join(quote_field(v, sep) for v in values)


        def format_rows(rows, sep=","):
            return "\n".join(format_row(row, sep) for row in rows) + "\n"
    '''),
    "tests/test_parse.py": src(r'''
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
    '''),
    "tests/test_types.py": src(r'''
        from csvlite.types import coerce


        def test_coerce_numbers():
            assert coerce("42") == 42
            assert coerce(" 7 ") == 7
            assert coerce("2.5") == 2.5


        def test_coerce_other():
            assert coerce("") is None
            assert coerce("True") is True
            assert coerce("false") is False
            assert coerce("abc") == "abc"
    '''),
    "tests/test_write.py": src(r'''
        from csvlite.write import format_row, format_rows


        def test_format_row():
            assert format_row(["a", "b,c", None, 3]) == 'a,"b,c",,3'


        def test_format_rows():
            assert format_rows([["x", 1], ["y", 2]]) == "x,1\ny,2\n"
    '''),
}

EASY_TASKS.append(dict(
    tier="easy", n=1, base="csvlite",
    bug=[("csvlite/parse.py",
          "            if char == '\"':\n"
          "                if i + 1 < len(line) and line[i + 1] == '\"':\n"
          "                    current.append('\"')\n"
          "                    i += 1\n"
          "                else:\n"
          "                    in_quotes = False\n",
          "            if char == '\"':\n"
          "                in_quotes = False\n")],
    hidden={"tests/test_parse.py": src(r'''


        def test_split_escaped_quotes():
            assert split_line('"say ""hi""",x') == ['say "hi"', "x"]
            assert split_line('""""') == ['"']
    ''')},
    statement=src(r'''
        Escaped quotes inside quoted CSV fields are lost

        In CSV a double quote inside a quoted field is written twice (`""`). `csvlite` drops these:

        ```python
        >>> from csvlite import split_line
        >>> split_line('"say ""hi""",x')
        ['say hi', 'x']
        ```

        Expected `['say "hi"', 'x']`: each `""` inside a quoted field stands for one `"` character.
        Files written by `csvlite.format_rows` itself use this escaping, so they do not round-trip.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=2, base="csvlite",
    bug=[("csvlite/parse.py", "        row = row + [\"\"] * (len(header) - len(row))\n", "")],
    hidden={"tests/test_parse.py": src(r'''


        def test_parse_records_short_rows():
            text = "name,age,city\nann,31\n"
            assert parse_records(text) == [{"name": "ann", "age": "31", "city": ""}]
            assert parse_records(text, convert=True) == [{"name": "ann", "age": 31, "city": None}]
    ''')},
    statement=src(r'''
        parse_records drops columns when a row is shorter than the header

        Spreadsheet exports often leave out empty trailing fields. With

        ```
        name,age,city
        ann,31
        ```

        `csvlite.parse_records(text)` returns `[{"name": "ann", "age": "31"}]`: the `city` key is
        missing, so `record["city"]` raises `KeyError`. As documented, missing trailing fields should
        be `""` (and so `None` with `convert=True`): `[{"name": "ann", "age": "31", "city": ""}]`.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=3, base="csvlite",
    bug=[("csvlite/types.py",
          "    try:\n        return int(text)\n    except ValueError:\n        pass\n"
          "    try:\n        return float(text)\n    except ValueError:\n        return value\n",
          "    if text.isdigit():\n        return int(text)\n"
          "    if text.replace(\".\", \"\", 1).isdigit():\n        return float(text)\n    return value\n")],
    hidden={"tests/test_types.py": src(r'''


        def test_coerce_negative_and_exponent():
            assert coerce("-3") == -3
            assert coerce(" -0.5 ") == -0.5
            assert coerce("1e3") == 1000.0
    ''')},
    statement=src(r'''
        coerce() leaves negative numbers as strings

        `csvlite.coerce` (used by `parse_records(..., convert=True)`) converts `"42"` to `42` but
        returns negative numbers and numbers in exponent notation unchanged:

        ```python
        >>> coerce("-3"), coerce("-0.5"), coerce("1e3")
        ('-3', '-0.5', '1e3')
        ```

        Expected `-3`, `-0.5` and `1000.0`: anything Python reads as an int or a float should be
        converted.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=4, base="csvlite",
    bug=[("csvlite/write.py",
          "    if sep in text or '\"' in text or \"\\n\" in text:\n"
          "        return '\"' + text.replace('\"', '\"\"') + '\"'\n",
          "    if sep in text:\n"
          "        return '\"' + text + '\"'\n")],
    hidden={"tests/test_write.py": src(r'''


        def test_quote_field_escapes_quotes_and_newlines():
            from csvlite.write import quote_field

            assert quote_field('say "hi"') == '"say ""hi"""'
            assert quote_field("two\nlines") == '"two\nlines"'
            assert format_row(['a "b", c']) == '"a ""b"", c"'
    ''')},
    statement=src(r'''
        format_rows writes broken CSV for fields with quotes or newlines

        ```python
        >>> from csvlite import format_row
        >>> format_row(['say "hi"', "two\nlines"])
        'say "hi",two\nlines'
        ```

        A field that contains a double quote or a newline must be quoted, and double quotes inside a
        quoted field must be doubled: the expected output is `'"say ""hi""","two\nlines"'`. Fields
        holding the separator are quoted already but their quotes are not doubled either.
    '''),
))

# -- wordfreq --------------------------------------------------------------------------------------

EASY_BASES["wordfreq"] = {
    "README.md": src(r'''
        # wordfreq

        Word frequencies of plain text: `tokenize`, `count_words`, `top_words` and a small text
        report. Run the tests with `python -m pytest`.
    '''),
    "wordfreq/__init__.py": '"""Word frequencies of plain text."""\n',
    "wordfreq/tokenize.py": src(r'''
        """Split text into lower-case words."""

        import re

        WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


        def tokenize(text):
            """Lower-case words of text; an apostrophe inside a word is kept ("don't")."""
            return WORD.findall(text.lower())


        def ngrams(words, n=2):
            """Consecutive n-word tuples."""
            return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    '''),
    "wordfreq/counter.py": src(r'''
        """Word counts."""

        from collections import Counter

        from wordfreq.tokenize import tokenize


        def count_words(text, stopwords=()):
            """Counter of the words of text, leaving out stopwords (compared case-insensitively)."""
            stop = {word.lower() for word in stopwords}
            return Counter(word for word in tokenize(text) if word not in stop)


        def top_words(text, n=3, stopwords=()):
            """The n most frequent (word, count) pairs; words with the same count in alphabetical order."""
            counts = count_words(text, stopwords)
            ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            return ranked[:n]
    '''),
    "wordfreq/report.py": src(r'''
        """Plain-text frequency tables."""

        from wordfreq.counter import top_words


        def format_table(pairs, header=("word", "count")):
            """A two-column table; the word column is as wide as its longest entry (header included)."""
            width = max([len(header[0])] + [len(word) for word, _ in pairs])
            lines = [f"{header[0]:<{width}}  {header[1]}"]
            for word, count in pairs:
                lines.append(f"{word:<{width}}  {count}")
            return "\n".join(lines)


        def report(text, n=3, stopwords=()):
            """The table of the n most frequent words of text."""
            return format_table(top_words(text, n, stopwords))
    '''),
    "tests/test_tokenize.py": src(r'''
        from wordfreq.tokenize import ngrams, tokenize


        def test_tokenize():
            assert tokenize("The cat, the HAT!") == ["the", "cat", "the", "hat"]
            assert tokenize("route 66") == ["route", "66"]


        def test_ngrams():
            assert ngrams(["a", "b", "c"]) == [("a", "b"), ("b", "c")]
    '''),
    "tests/test_counter.py": src(r'''
        from wordfreq.counter import count_words, top_words


        def test_count_words():
            counts = count_words("a cat and a dog and a bird", stopwords=["and"])
            assert counts["a"] == 3 and counts["cat"] == 1 and "and" not in counts


        def test_top_words():
            text = "red red red blue blue green"
            assert top_words(text, n=2) == [("red", 3), ("blue", 2)]
    '''),
    "tests/test_report.py": src(r'''
        from wordfreq.report import report


        def test_report():
            assert report("ox ox cat", n=2) == "word  count\nox    2\ncat   1"
    '''),
}

EASY_TASKS.append(dict(
    tier="easy", n=5, base="wordfreq",
    bug=[("wordfreq/tokenize.py", "WORD = re.compile(r\"[a-z0-9]+(?:'[a-z]+)?\")", "WORD = re.compile(r\"[a-z0-9]+\")")],
    hidden={"tests/test_tokenize.py": src(r'''


        def test_tokenize_contractions():
            assert tokenize("Don't stop, it's fine") == ["don't", "stop", "it's", "fine"]
            assert tokenize("'quoted'") == ["quoted"]
    ''')},
    statement=src(r'''
        Contractions are split into two words

        `wordfreq.tokenize.tokenize("Don't stop")` returns `["don", "t", "stop"]`, so reports
        count a word "t". As the docstring says, an apostrophe inside a word should be kept:
        expected `["don't", "stop"]`. Quotes around a word (`'quoted'`) are not part of it.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=6, base="wordfreq",
    bug=[("wordfreq/counter.py", "key=lambda item: (-item[1], item[0]))",
          "key=lambda item: item[1], reverse=True)")],
    hidden={"tests/test_counter.py": src(r'''


        def test_top_words_ties_alphabetical():
            assert top_words("pear fig pear apple fig kiwi", n=3) == [("fig", 2), ("pear", 2), ("apple", 1)]
    ''')},
    statement=src(r'''
        top_words does not order ties alphabetically

        `top_words("pear fig pear apple fig kiwi", n=3)` returns
        `[("pear", 2), ("fig", 2), ("apple", 1)]`: words with the same count come out in the order
        they first appear in the text. The docstring promises alphabetical order among equal
        counts, i.e. `[("fig", 2), ("pear", 2), ("apple", 1)]`.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=7, base="wordfreq",
    bug=[("wordfreq/counter.py", "stop = {word.lower() for word in stopwords}", "stop = set(stopwords)")],
    hidden={"tests/test_counter.py": src(r'''


        def test_stopwords_any_case():
            counts = count_words("The cat and the dog", stopwords=["The", "AND"])
            assert dict(counts) == {"cat": 1, "dog": 1}
    ''')},
    statement=src(r'''
        Stopwords given with capitals are not removed

        ```python
        >>> count_words("The cat and the dog", stopwords=["The", "AND"])
        Counter({'the': 2, 'cat': 1, 'and': 1, 'dog': 1})
        ```

        Stopwords should be compared case-insensitively (the text is lower-cased anyway), so the
        result should be `Counter({'cat': 1, 'dog': 1})`.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=8, base="wordfreq",
    bug=[("wordfreq/report.py", "width = max([len(header[0])] + [len(word) for word, _ in pairs])",
          "width = len(header[0])")],
    hidden={"tests/test_report.py": src(r'''


        def test_report_long_words():
            from wordfreq.report import format_table

            table = format_table([("elephant", 2), ("ox", 1)])
            assert table == "word      count\nelephant  2\nox        1"
    ''')},
    statement=src(r'''
        Report table is misaligned when a word is longer than the header

        `wordfreq.report.format_table([("elephant", 2), ("ox", 1)])` gives

        ```
        word  count
        elephant  2
        ox    1
        ```

        The word column should be as wide as its longest entry (header included), so that the
        counts line up:

        ```
        word      count
        elephant  2
        ox        1
        ```
    '''),
))

# -- intervals -------------------------------------------------------------------------------------

EASY_BASES["intervals"] = {
    "README.md": src(r'''
        # intervals

        Closed integer intervals and operations on lists of them (merge, covered length, gaps).
        Run the tests with `python -m pytest`.
    '''),
    "intervals/__init__.py": src(r'''
        """Closed integer intervals."""

        from intervals.core import Interval
        from intervals.ops import gaps, merge_all, total_length

        __all__ = ["Interval", "gaps", "merge_all", "total_length"]
    '''),
    "intervals/core.py": src(r'''
        """Closed integer intervals [start, end]."""


        class Interval:
            def __init__(self, start, end):
                if end < start:
                    raise ValueError(f"end {end} is before start {start}")
                self.start = start
                self.end = end

            def __repr__(self):
                return f"Interval({self.start}, {self.end})"

            def __eq__(self, other):
                return isinstance(other, Interval) and (self.start, self.end) == (other.start, other.end)

            def __len__(self):
                """Number of integers in the interval."""
                return self.end - self.start + 1

            def contains(self, value):
                return self.start <= value <= self.end

            def overlaps(self, other):
                """True when the two intervals share at least one integer."""
                return self.start <= other.end and other.start <= self.end
    '''),
    "intervals/ops.py": src(r'''
        """Operations on lists of intervals."""

        from intervals.core import Interval


        def merge_all(intervals):
            """Merge overlapping or adjacent intervals ([1, 3] and [4, 6] become [1, 6]), sorted by start."""
            merged = []
            for item in sorted(intervals, key=lambda i: (i.start, i.end)):
                if merged and item.start <= merged[-1].end + 1:
                    last = merged[-1]
                    merged[-1] = Interval(last.start, max(last.end, item.end))
                else:
                    merged.append(item)
            return merged


        def total_length(intervals):
            """How many integers are covered by at least one interval."""
            return sum(len(i) for i in merge_all(intervals))


        def gaps(intervals, start, end):
            """The intervals of integers in [start, end] that no interval covers."""
            result = []
            cursor = start
            for item in merge_all(intervals):
                if item.end < cursor:
                    continue
                if item.start > end:
                    break
                if item.start > cursor:
                    result.append(Interval(cursor, item.start - 1))
                cursor = max(cursor, item.end + 1)
            if cursor <= end:
                result.append(Interval(cursor, end))
            return result
    '''),
    "tests/test_core.py": src(r'''
        import pytest

        from intervals.core import Interval


        def test_interval_basics():
            i = Interval(2, 5)
            assert len(i) == 4
            assert i.contains(2) and i.contains(5) and not i.contains(6)


        def test_overlaps():
            assert Interval(1, 3).overlaps(Interval(3, 5))
            assert not Interval(1, 3).overlaps(Interval(4, 5))


        def test_invalid():
            with pytest.raises(ValueError):
                Interval(5, 1)
    '''),
    "tests/test_ops.py": src(r'''
        from intervals.core import Interval
        from intervals.ops import gaps, merge_all, total_length


        def test_merge_overlapping():
            merged = merge_all([Interval(5, 8), Interval(1, 3), Interval(2, 6)])
            assert merged == [Interval(1, 8)]


        def test_merge_disjoint():
            assert merge_all([Interval(10, 12), Interval(1, 2)]) == [Interval(1, 2), Interval(10, 12)]


        def test_total_length():
            assert total_length([Interval(1, 3), Interval(2, 6), Interval(10, 10)]) == 7


        def test_gaps():
            found = gaps([Interval(2, 3), Interval(6, 7)], 0, 10)
            assert found == [Interval(0, 1), Interval(4, 5), Interval(8, 10)]
    '''),
}

EASY_TASKS.append(dict(
    tier="easy", n=9, base="intervals",
    bug=[("intervals/ops.py", "Interval(last.start, max(last.end, item.end))", "Interval(last.start, item.end)")],
    hidden={"tests/test_ops.py": src(r'''


        def test_merge_nested():
            assert merge_all([Interval(1, 10), Interval(2, 3)]) == [Interval(1, 10)]
            assert total_length([Interval(0, 9), Interval(3, 4), Interval(5, 5)]) == 10
    ''')},
    statement=src(r'''
        merge_all shrinks an interval that contains another one

        ```python
        >>> merge_all([Interval(1, 10), Interval(2, 3)])
        [Interval(1, 3)]
        ```

        Expected `[Interval(1, 10)]`. `total_length` is wrong for the same input (it reports 3
        covered integers instead of 10).
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=10, base="intervals",
    bug=[("intervals/ops.py", "item.start <= merged[-1].end + 1:", "item.start <= merged[-1].end:")],
    hidden={"tests/test_ops.py": src(r'''


        def test_merge_adjacent():
            assert merge_all([Interval(4, 6), Interval(1, 3)]) == [Interval(1, 6)]
            assert merge_all([Interval(1, 3), Interval(5, 6)]) == [Interval(1, 3), Interval(5, 6)]
    ''')},
    statement=src(r'''
        Adjacent intervals are not merged

        The docstring of `intervals.ops.merge_all` says that adjacent intervals are merged
        (`[1, 3]` and `[4, 6]` become `[1, 6]`), but

        ```python
        >>> merge_all([Interval(4, 6), Interval(1, 3)])
        [Interval(1, 3), Interval(4, 6)]
        ```

        Intervals with a gap between them (`[1, 3]` and `[5, 6]`) must stay separate.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=11, base="intervals",
    bug=[("intervals/ops.py", "    if cursor <= end:\n", "    if cursor < end:\n")],
    hidden={"tests/test_ops.py": src(r'''


        def test_gaps_single_point_at_end():
            assert gaps([Interval(1, 3)], 1, 4) == [Interval(4, 4)]
            assert gaps([], 7, 7) == [Interval(7, 7)]
    ''')},
    statement=src(r'''
        gaps() misses an uncovered point at the end of the range

        `gaps([Interval(1, 3)], 1, 4)` returns `[]`, but 4 is not covered: expected
        `[Interval(4, 4)]`. Likewise `gaps([], 7, 7)` should be `[Interval(7, 7)]`.
    '''),
))

# -- iniparse --------------------------------------------------------------------------------------

EASY_BASES["iniparse"] = {
    "README.md": src(r'''
        # iniparse

        Read INI files into nested dicts and get typed values (`get`, `get_bool`, `get_int`,
        `get_list`). Run the tests with `python -m pytest`.
    '''),
    "iniparse/__init__.py": src(r'''
        """Read INI files into nested dicts."""

        from iniparse.reader import ParseError, parse
        from iniparse.values import get, get_bool, get_int, get_list

        __all__ = ["ParseError", "parse", "get", "get_bool", "get_int", "get_list"]
    '''),
    "iniparse/reader.py": src(r'''
        """Read INI text into {section: {key: value}}."""


        class ParseError(ValueError):
            def __init__(self, lineno, message):
                super().__init__(f"line {lineno}: {message}")
                self.lineno = lineno


        def parse(text):
            """Sections in [brackets]; `key = value` pairs; `#` and `;` start comment lines.

            Keys before the first section go into the "DEFAULT" section. Keys are lower-cased and
            values stripped; a value may itself contain "=".
            """
            data = {"DEFAULT": {}}
            section = data["DEFAULT"]
            for lineno, raw in enumerate(text.splitlines(), 1):
                line = raw.strip()
                if not line or line.startswith(("#", ";")):
                    continue
                if line.startswith("["):
                    if not line.endswith("]"):
                        raise ParseError(lineno, f"unterminated section header {line!r}")
                    section = data.setdefault(line[1:-1].strip(), {})
                    continue
                key, sep, value = line.partition("=")
                if not sep:
                    raise ParseError(lineno, f"expected 'key = value', got {line!r}")
                section[key.strip().lower()] = value.strip()
            return data
    '''),
    "iniparse/values.py": src(r'''
        """Typed access to parsed INI values."""

        TRUE = {"1", "yes", "true", "on"}
        FALSE = {"0", "no", "false", "off"}


        def get(data, section, key, default=None):
            """A value from section, else from DEFAULT, else default; keys are case-insensitive."""
            key = key.lower()
            if key in data.get(section, {}):
                return data[section][key]
            return data.get("DEFAULT", {}).get(key, default)


        def get_bool(data, section, key, default=False):
            """yes/no, true/false, on/off, 1/0 in any letter case."""
            value = get(data, section, key)
            if value is None:
                return default
            lowered = value.lower()
            if lowered in TRUE:
                return True
            if lowered in FALSE:
                return False
            raise ValueError(f"[{section}] {key}: not a boolean: {value!r}")


        def get_int(data, section, key, default=0):
            value = get(data, section, key)
            return default if value is None else int(value)


        def get_list(data, section, key, sep=","):
            """Comma-separated values, stripped; empty items are dropped."""
            value = get(data, section, key)
            if value is None:
                return []
            return [item.strip() for item in value.split(sep) if item.strip()]
    '''),
    "tests/test_reader.py": src(r'''
        import pytest

        from iniparse.reader import ParseError, parse

        TEXT = """
        # global settings
        name = demo

        [server]
        Host = example.org
        port = 8080
        ; a comment
        """


        def test_parse_sections():
            data = parse(TEXT)
            assert data["DEFAULT"] == {"name": "demo"}
            assert data["server"] == {"host": "example.org", "port": "8080"}


        def test_parse_errors():
            with pytest.raises(ParseError, match="line 1"):
                parse("[broken")
            with pytest.raises(ParseError, match="line 2"):
                parse("[a]\njust words")
    '''),
    "tests/test_values.py": src(r'''
        from iniparse.reader import parse
        from iniparse.values import get, get_bool, get_int, get_list

        DATA = parse("""
        debug = no
        [app]
        workers = 4
        verbose = true
        plugins = auth, cache ,logs
        """)


        def test_get_with_default_section():
            assert get(DATA, "app", "workers") == "4"
            assert get(DATA, "app", "debug") == "no"
            assert get(DATA, "app", "missing", "x") == "x"


        def test_typed_values():
            assert get_int(DATA, "app", "workers") == 4
            assert get_bool(DATA, "app", "verbose") is True
            assert get_bool(DATA, "app", "debug") is False
            assert get_list(DATA, "app", "plugins") == ["auth", "cache", "logs"]
    '''),
}

EASY_TASKS.append(dict(
    tier="easy", n=12, base="iniparse",
    bug=[("iniparse/reader.py",
          "        key, sep, value = line.partition(\"=\")\n"
          "        if not sep:\n",
          "        parts = line.split(\"=\")\n"
          "        if len(parts) < 2:\n"),
         ("iniparse/reader.py",
          "        section[key.strip().lower()] = value.strip()\n",
          "        key, value = parts[0], parts[1]\n"
          "        section[key.strip().lower()] = value.strip()\n")],
    hidden={"tests/test_reader.py": src(r'''


        def test_value_with_equals_sign():
            data = parse("[db]\nurl = postgres://h/db?sslmode=require&x=1\nempty =\n")
            assert data["db"] == {"url": "postgres://h/db?sslmode=require&x=1", "empty": ""}
    ''')},
    statement=src(r'''
        Values containing "=" are truncated

        ```ini
        [db]
        url = postgres://h/db?sslmode=require
        ```

        `iniparse.parse(...)["db"]["url"]` is `"postgres://h/db?sslmode"`: everything after the
        second `=` is lost. Only the first `=` on a line separates the key from the value.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=13, base="iniparse",
    bug=[("iniparse/values.py", "    lowered = value.lower()\n", "    lowered = value.strip()\n")],
    hidden={"tests/test_values.py": src(r'''


        def test_get_bool_any_case():
            data = parse("[x]\na = Yes\nb = OFF\nc = True\n")
            assert get_bool(data, "x", "a") is True
            assert get_bool(data, "x", "b") is False
            assert get_bool(data, "x", "c") is True
    ''')},
    statement=src(r'''
        get_bool rejects "Yes" and "OFF"

        With `flag = Yes` in a section, `iniparse.get_bool(data, "section", "flag")` raises
        `ValueError: ... not a boolean: 'Yes'`. Booleans should be accepted in any letter case
        (`Yes`, `OFF`, `True`, ...), as the docstring says.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=14, base="iniparse",
    bug=[("iniparse/values.py", "    return [item.strip() for item in value.split(sep) if item.strip()]\n",
          "    return [item.strip() for item in value.split(sep)]\n")],
    hidden={"tests/test_values.py": src(r'''


        def test_get_list_drops_empty_items():
            data = parse("[x]\nnone =\nsome = a,, b,\n")
            assert get_list(data, "x", "none") == []
            assert get_list(data, "x", "some") == ["a", "b"]
    ''')},
    statement=src(r'''
        get_list returns empty strings

        For `plugins =` (an empty value) `iniparse.get_list(data, "app", "plugins")` returns `[""]`
        instead of `[]`, and `a,, b,` gives `["a", "", "b", ""]` instead of `["a", "b"]`.
    '''),
))
EASY_TASKS.append(dict(
    tier="easy", n=15, base="iniparse",
    bug=[("iniparse/values.py", "    key = key.lower()\n    if key in", "    if key in")],
    hidden={"tests/test_values.py": src(r'''


        def test_get_keys_case_insensitive():
            data = parse("Timeout = 5\n[net]\nRetries = 3\n")
            assert get(data, "net", "Retries") == "3"
            assert get_int(data, "net", "TIMEOUT") == 5
            assert get(data, "net", "retries") == "3"
    ''')},
    statement=src(r'''
        Looking up a key with capitals fails

        Keys are lower-cased when the file is parsed, so `Retries = 3` is stored as `retries`, but
        `iniparse.get(data, "net", "Retries")` returns `None` (and `get_int(data, "net", "TIMEOUT")`
        returns the default). Lookups should be case-insensitive.
    '''),
))
