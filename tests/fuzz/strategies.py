"""Hypothesis strategies shared by the fuzz tests: arbitrary JSON values and byte-level damage."""

from __future__ import annotations

from hypothesis import strategies as st

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
# file contents that are not JSON at all: invalid UTF-8, NUL bytes, a cut-off document
garbage = st.binary(max_size=64) | st.sampled_from([b"\xff\xfe\x00", b"{", b'{"a": ', b"[1, 2", b"\x00" * 8, b"null"])
