"""The model registry: names -> locally prepared weights and tokenizers (no hub at run time)."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LoraAdapter": "legorl.models.lora",
        "ModelSpec": "legorl.models.registry",
        "add_lora": "legorl.models.lora",
        "load_model": "legorl.models.registry",
        "load_tokenizer": "legorl.models.registry",
        "prepare_model": "legorl.models.registry",
        "resolve_model": "legorl.models.registry",
    },
)
