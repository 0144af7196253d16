"""A small bookkeeping library; amounts are integer cents."""
