from wordfreq.report import report


def test_report():
    assert report("ox ox cat", n=2) == "word  count\nox    2\ncat   1"
