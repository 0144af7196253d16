"""Counting words."""


def word_count(text):
    """Return the number of whitespace-separated words in text."""
    words = text.split()
    return len(words)


def longest_word(text):
    """Return the longest word (the first one on ties); "" for empty text."""
    best = ""
    for word in text.split():
        if len(word) > len(best):
            best = word
    return best
