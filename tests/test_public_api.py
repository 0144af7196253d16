import importlib
import subprocess
import sys

import pytest

import legorl

PACKAGES = [
    "engines",
    "gateway",
    "sandbox",
    "tasks",
    "harnesses",
    "models",
    "trajectory",
    "loop",
    "training",
    "grading",
]


def test_every_public_name_resolves():
    for name in legorl.__all__:
        assert getattr(legorl, name) is not None, name


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_lists_its_public_surface(package):
    mod = importlib.import_module(f"legorl.{package}")
    assert mod.__all__, f"legorl.{package} has an empty __all__"
    for name in mod.__all__:
        assert not name.startswith("_")
        assert getattr(mod, name) is not None, f"legorl.{package}.{name}"
    with pytest.raises(AttributeError):
        mod.no_such_name  # noqa: B018


def test_import_and_help_do_not_load_torch():
    packages = ", ".join(f"legorl.{p}" for p in PACKAGES)
    code = f"import sys, legorl, legorl.cli, {packages}; assert 'torch' not in sys.modules, 'torch imported eagerly'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_run_rollout_is_reachable_from_public_names_only():
    """Every type a caller needs to build a rollout's context and run it is a public name of
    ``legorl`` (or of the config): run_rollout(rollout_context(cfg, stack, sandbox_backend(cfg.sandbox),
    build_harness(cfg.rollout)), get_task(id)) inside ``async with open_gateway_stack(cfg.engine, ...)``."""
    import inspect

    from legorl import config

    public = set(legorl.__all__) | set(dir(config)) | {"Any", "None", "str", "int", "float", "bool", "Path"}
    for fn in (legorl.run_rollout, legorl.rollout_context, legorl.open_gateway_stack, legorl.sandbox_backend):
        for name, param in inspect.signature(fn).parameters.items():
            if param.default is not inspect.Parameter.empty and param.kind is inspect.Parameter.KEYWORD_ONLY:
                continue  # optional knobs
            words = {w for w in str(param.annotation).replace("|", " ").split() if w[:1].isupper()}
            assert words <= public, f"{fn.__name__}({name}: {param.annotation}) needs a non-public name"
    for name in ("RolloutContext", "GatewayStack", "SandboxBackend", "Harness", "Task", "RunConfig"):
        assert name in public or hasattr(legorl, name), name
