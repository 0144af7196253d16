"""HTML escaping."""


def escape(text):
    """Escape the HTML special characters &, <, > and "."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))
