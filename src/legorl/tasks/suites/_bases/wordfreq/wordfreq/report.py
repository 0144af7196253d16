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
