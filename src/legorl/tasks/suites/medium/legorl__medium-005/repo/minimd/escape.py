"""HTML escaping."""


def escape(text):
    """Escape the HTML special characters &, <, > and "."""
    return (text.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("&", "&amp;"))
