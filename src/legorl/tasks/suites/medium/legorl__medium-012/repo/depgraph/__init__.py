"""Dependency graphs."""
