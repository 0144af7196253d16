"""Small helpers for words and letter case."""

from textkit.case import shout, snake_to_camel, title_words
from textkit.count import longest_word, word_count

__all__ = ["shout", "snake_to_camel", "title_words", "longest_word", "word_count"]
