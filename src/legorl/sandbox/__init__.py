"""Sandboxes: the protocol, the bubblewrap and podman backends, the layered image cache."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ExecResult": "legorl.sandbox.base",
        "Sandbox": "legorl.sandbox.base",
        "SandboxBackend": "legorl.sandbox.base",
        "SandboxSpec": "legorl.sandbox.base",
        "BwrapBackend": "legorl.sandbox.bwrap",
        "PodmanBackend": "legorl.sandbox.podman",
        "ImageCache": "legorl.sandbox.images",
        "default_cache": "legorl.sandbox.images",
    },
)
