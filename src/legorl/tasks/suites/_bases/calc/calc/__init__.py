"""Tiny arithmetic and statistics helpers."""

from calc.arith import add, multiply, subtract
from calc.stats import mean, total

__all__ = ["add", "subtract", "multiply", "mean", "total"]
