"""``python -m legorl.cli``: what the `legorl` console script runs (tests and detached processes use it)."""

from legorl.cli import main

main()
