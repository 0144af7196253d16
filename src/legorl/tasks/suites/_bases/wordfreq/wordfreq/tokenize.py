"""Split text into lower-case words."""

import re

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokenize(text):
    """Lower-case words of text; an apostrophe inside a word is kept ("don't")."""
    return WORD.findall(text.lower())


def ngrams(words, n=2):
    """Consecutive n-word tuples."""
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
