from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.errors import ConfigError

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.json"))


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
