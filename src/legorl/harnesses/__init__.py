"""Harness adapters: the real agent programs, run unchanged inside a sandbox."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Budget": "legorl.harnesses.base",
        "Harness": "legorl.harnesses.base",
        "HarnessResult": "legorl.harnesses.base",
        "get_harness": "legorl.harnesses.registry",
        "harness_class": "legorl.harnesses.registry",
        "client_envs": "legorl.harnesses.client_env",
    },
)
