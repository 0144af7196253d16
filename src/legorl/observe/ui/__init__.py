"""The run UI: server-rendered pages (Jinja2) with a small vanilla script for live updates (SSE) and
SVG charts. :mod:`.pages` renders, :mod:`.server` serves with an access token, :mod:`.export` writes
a static snapshot."""
