import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from legorl.config import (
    CONFIGS_DIR,
    BwrapSandboxConfig,
    PodmanSandboxConfig,
    RunConfig,
    shipped_config,
)
from legorl.errors import ConfigError
from legorl.harnesses.registry import HARNESS_NAMES
from legorl.sandbox.base import SandboxSpec
from legorl.settings import DEFAULT_IMAGE_CACHE_BYTES, Settings

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.json"))


def test_the_shipped_configs_are_found():
    # the parametrized test below is vacuous if the glob finds nothing (moved directory)
    assert {p.name for p in CONFIGS} >= {"demo.json", "grpo.json"}
    assert CONFIGS_DIR == CONFIGS[0].parent and shipped_config("demo") == CONFIGS_DIR / "demo.json"
    with pytest.raises(ConfigError, match="no-such-config.json not found"):
        shipped_config("no-such-config")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_parses(path):
    RunConfig.load(path)


def test_overrides_and_clear_errors(tmp_path):
    cfg = RunConfig.load(None, **{"trainer.lr": 2e-6, "steps": 5})
    assert cfg.trainer.lr == 2e-6 and cfg.steps == 5
    with pytest.raises(ConfigError, match="trainer.lrr"):
        RunConfig.load(None, **{"trainer.lrr": 1.0})
    with pytest.raises(ConfigError, match="group_size"):
        RunConfig.load(None, group_size=1)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json"):
        RunConfig.load(bad)
    with pytest.raises(ConfigError, match="grpo"):
        RunConfig.load(None, **{"trainer.objective": "grpo"})


def test_sandbox_section_is_discriminated_by_type():
    assert isinstance(RunConfig().sandbox, BwrapSandboxConfig)
    cfg = RunConfig.load(
        None,
        **{
            "sandbox.type": "podman",
            "sandbox.image": "x:1",
            "sandbox.memory_mb": 512,
            "sandbox.extra_run_args": ["--cpus=1"],
        },
    )
    assert isinstance(cfg.sandbox, PodmanSandboxConfig)
    assert (cfg.sandbox.image, cfg.sandbox.memory_mb, cfg.sandbox.extra_run_args) == ("x:1", 512, ["--cpus=1"])
    # a dump reloads to the same config (the discriminator leads the section)
    assert RunConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert next(iter(cfg.sandbox.model_dump())) == "type"
    with pytest.raises(ConfigError, match="'bwrap', 'podman'"):
        RunConfig.load(None, **{"sandbox.type": "lxc"})
    with pytest.raises(
        ConfigError, match=r"field 'sandbox.cgroups' \(sandbox type 'podman'\): Extra inputs"
    ):  # a bwrap option on podman
        RunConfig.load(None, **{"sandbox.type": "podman", "sandbox.cgroups": False})
    with pytest.raises(ConfigError, match=r"field 'sandbox.image' \(sandbox type 'bwrap'\)"):  # and the other way round
        RunConfig.load(None, **{"sandbox.image": "x:1"})


def test_sandbox_limit_defaults_are_the_sandbox_specs():
    spec = {f.name: f.default for f in dataclasses.fields(SandboxSpec)}
    for box in (BwrapSandboxConfig(), PodmanSandboxConfig()):
        assert (box.memory_mb, box.max_pids) == (spec["memory_mb"], spec["max_pids"])


def test_moved_fields_are_gone_without_aliases():
    # rollout.sandbox became the sandbox section, flagged_policy and grade_timeout_s moved to grading
    for old in ({"rollout.sandbox": "bwrap"}, {"flagged_policy": "drop"}, {"rollout.grade_timeout_s": 60}):
        with pytest.raises(ConfigError, match="Extra inputs are not permitted"):
            RunConfig.load(None, **old)
    cfg = RunConfig.load(
        None,
        **{
            "grading.flagged_policy": "drop",
            "grading.reward_mode": "partial",
            "grading.retries": 0,
            "grading.timeout_s": 30,
        },
    )
    assert cfg.grading.model_dump() == {
        "reward_mode": "partial",
        "retries": 0,
        "flagged_policy": "drop",
        "timeout_s": 30.0,
        "canaries": {"share": 0.0},
    }
    with pytest.raises(ConfigError, match="grading.reward_mode"):
        RunConfig.load(None, **{"grading.reward_mode": "fractional"})


def test_harness_is_checked_against_the_registry():
    for name in HARNESS_NAMES:
        assert RunConfig.load(None, **{"rollout.harness": name}).rollout.harness == name
    with pytest.raises(ConfigError) as exc:
        RunConfig.load(None, **{"rollout.harness": "claude_code"})
    assert "unknown harness 'claude_code'; known: " + ", ".join(HARNESS_NAMES) in str(exc.value)


def test_validating_a_config_imports_nothing_heavy():
    # the harness check reads the registry's names only: no adapter, no torch, no web framework
    code = (
        "import sys; from legorl.config import RunConfig; RunConfig.load('configs/demo.json'); "
        "heavy = [m for m in ('torch', 'transformers', 'fastapi', 'uvicorn', 'legorl.harnesses.minimal') "
        "if m in sys.modules]; assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=CONFIGS_DIR.parent)


def test_settings_from_the_environment(tmp_path):
    s = Settings.from_env({"HOME": str(tmp_path)})
    assert s.legorl_home.name == "legorl" and s.legorl_home.parent.name == ".cache"
    assert (s.image_cache_bytes, s.cgroups_enabled, s.bwrap_userns) == (DEFAULT_IMAGE_CACHE_BYTES, True, True)
    s = Settings.from_env(
        {
            "LEGORL_HOME": str(tmp_path / "h"),
            "LEGORL_IMAGE_CACHE_BYTES": "1000",
            "LEGORL_NO_CGROUPS": "1",
            "LEGORL_BWRAP_USERNS": "0",
        }
    )
    assert (s.legorl_home, s.image_cache_bytes, s.cgroups_enabled, s.bwrap_userns) == (
        tmp_path / "h",
        1000,
        False,
        False,
    )
    assert Settings.from_env({"LEGORL_NO_CGROUPS": "0"}).cgroups_enabled
    assert Settings.from_env({"LEGORL_HOME": "~/x"}).legorl_home == Path.home() / "x"
    with pytest.raises(ConfigError, match="LEGORL_IMAGE_CACHE_BYTES='20G'"):
        Settings.from_env({"LEGORL_IMAGE_CACHE_BYTES": "20G"})
    with pytest.raises(ConfigError, match="LEGORL_NO_CGROUPS='maybe'"):
        Settings.from_env({"LEGORL_NO_CGROUPS": "maybe"})


def test_caches_follow_legorl_home(tmp_path, monkeypatch):
    from legorl.models.registry import models_dir
    from legorl.tasks.loader import task_sources_root

    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    assert models_dir() == tmp_path / "models"
    assert task_sources_root() == tmp_path / "tasks" / "sources"


KNOBS = ("LEGORL_HOME", "LEGORL_IMAGE_CACHE_BYTES", "LEGORL_NO_CGROUPS", "LEGORL_BWRAP_USERNS")


def test_settings_knobs_are_read_in_one_place():
    src = Path(__file__).resolve().parents[1] / "src" / "legorl"
    # a knob's name as a string literal is a reading of it (the docs write ``$LEGORL_HOME``)
    pattern = re.compile("[\"'](" + "|".join(KNOBS) + ")[\"']")
    readers = {str(p.relative_to(src)) for p in src.rglob("*.py") if pattern.search(p.read_text())}
    assert readers == {"settings.py"}, sorted(readers)


def test_ray_settings_without_ray_name_the_field_and_the_install(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real_find_spec(name, *a)
    )
    with pytest.raises(ConfigError, match=r"executor.type: ray need Ray: pip install 'legorl\[ray\]'"):
        RunConfig.load(None, **{"executor.type": "ray"})
    with pytest.raises(ConfigError, match=r"trainer.ranks > 1 need Ray"):
        RunConfig.load(None, **{"trainer.ranks": 2, "engine.colocate_trainer": False})
    assert RunConfig.load(None).executor.type == "local"  # the local default needs no Ray
