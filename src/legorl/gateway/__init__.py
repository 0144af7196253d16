"""The gateway between harness and engine: dialects, renderer, sessions, the served app."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Gateway": "legorl.gateway.app",
        "SamplingPolicy": "legorl.gateway.app",
        "GatewayServer": "legorl.gateway.server",
        "Renderer": "legorl.gateway.renderer",
        "ChatTemplateRenderer": "legorl.gateway.renderer",
        "SessionBudget": "legorl.gateway.sessions",
        "SessionReport": "legorl.gateway.sessions",
        "new_token": "legorl.gateway.sessions",
    },
)
