from wordfreq.tokenize import ngrams, tokenize


def test_tokenize():
    assert tokenize("The cat, the HAT!") == ["the", "cat", "the", "hat"]
    assert tokenize("route 66") == ["route", "66"]


def test_ngrams():
    assert ngrams(["a", "b", "c"]) == [("a", "b"), ("b", "c")]
