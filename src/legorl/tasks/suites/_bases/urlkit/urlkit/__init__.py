"""Percent-encoding, query strings and URLs."""
