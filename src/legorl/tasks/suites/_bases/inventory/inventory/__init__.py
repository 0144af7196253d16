"""Stock levels keyed by item name."""
