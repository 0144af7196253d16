"""Ranges, ratios and integer sequences."""
