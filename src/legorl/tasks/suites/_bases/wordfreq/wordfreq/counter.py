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
