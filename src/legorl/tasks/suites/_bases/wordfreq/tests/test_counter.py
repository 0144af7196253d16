from wordfreq.counter import count_words, top_words


def test_count_words():
    counts = count_words("a cat and a dog and a bird", stopwords=["and"])
    assert counts["a"] == 3 and counts["cat"] == 1 and "and" not in counts


def test_top_words():
    text = "red red red blue blue green"
    assert top_words(text, n=2) == [("red", 3), ("blue", 2)]
