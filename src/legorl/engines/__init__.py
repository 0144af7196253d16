"""Engines: token ids in, token ids + per-token logprobs out (:class:`Engine`)."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Engine": "legorl.engines.base",
        "EngineHealth": "legorl.engines.base",
        "GenerationResult": "legorl.engines.base",
        "SamplingParams": "legorl.engines.base",
        "EmbeddedEngine": "legorl.engines.embedded",
        "ScriptedEngine": "legorl.engines.scripted",
    },
)
