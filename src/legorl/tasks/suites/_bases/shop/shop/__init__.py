"""Prices, discounts, tax and a shopping cart."""
