"""Word frequencies of plain text."""
