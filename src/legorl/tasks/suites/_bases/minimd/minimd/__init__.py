"""A very small Markdown to HTML converter."""

from minimd.render import render

__all__ = ["render"]
