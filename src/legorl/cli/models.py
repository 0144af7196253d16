"""``legorl models prepare|list``: the built-in model registry."""

from __future__ import annotations

import json

import typer

from legorl.cli.common import console

app = typer.Typer(no_args_is_help=True, help="Model registry.")

# `legorl models list --json` keys (docs/cli.md; tests/test_cli_json.py checks them)
MODELS_JSON_KEYS = ("models",)
MODEL_JSON_KEYS = ("name", "hf_id", "wheel", "description", "cache_dir", "prepared")


@app.command("prepare")
def models_prepare(
    name: str = typer.Argument("smollm2-135m", help="Built-in model name."),
    force: bool = typer.Option(False, "--force", help="Rebuild the cached copy even if it looks complete."),
) -> None:
    """Convert a built-in model once into the local cache ($LEGORL_HOME)."""
    from legorl.models.registry import prepare_model

    path = prepare_model(name, force=force)
    console.print(f"{name}: {path}")


@app.command("list")
def models_list(
    as_json: bool = typer.Option(
        False,
        "--json",
        help=(
            'Print JSON: {"models": [{' + ", ".join(f'"{k}"' for k in MODEL_JSON_KEYS) + "}]} (hf_id: the upstream "
            "model it copies, never downloaded; wheel: the PyPI package shipping its GGUF; prepared: the cached "
            "safetensors copy is complete)."
        ),
    ),
) -> None:
    """Built-in model names (with --json: where each comes from and whether it is prepared)."""
    from legorl.models.registry import KNOWN_MODELS, model_cache_dir, verify_model_cache

    if not as_json:
        for name in KNOWN_MODELS:
            console.print(name)
        return
    rows = [
        {
            "name": m.name,
            "hf_id": m.hf_id,
            "wheel": m.wheel,
            "description": m.description,
            "cache_dir": str(model_cache_dir(m.name)),
            "prepared": verify_model_cache(m.name) is None,
        }
        for m in KNOWN_MODELS.values()
    ]
    print(json.dumps({"models": rows}, indent=2))
