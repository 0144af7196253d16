"""Fixtures for the dialect tests (helpers live in gw_helpers.py)."""

from gw_helpers import fake, real_gw, smol_tok  # noqa: F401
