"""What several command families share: the console, the ``--set``/``--suite`` options and the run
config they build."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from legorl.errors import ConfigError

if TYPE_CHECKING:
    from legorl.config import RunConfig

# A pipe or CI log gets a wide fixed width so the run table is never squashed.
console = Console(width=None if sys.stdout.isatty() else 160)

SET_HELP = "Override a field: --set trainer.lr=2e-6 (JSON values; repeatable)."
SUITE_HELP = "Task suite (a name from `legorl tasks list`, or a path); overrides the config's suite."


def overrides(set_: list[str], flag: str = "--set") -> dict[str, object]:
    """``--set key=value`` pairs (JSON values, else strings) as RunConfig.load overrides."""
    result: dict[str, object] = {}
    for item in set_:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"{flag} expects KEY=VALUE, got {item!r}")
        try:
            result[key] = json.loads(value)
        except json.JSONDecodeError:
            result[key] = value
    return result


def load_config(config: Path | None, set_: list[str], **more: object) -> RunConfig:
    """The run config: ``config`` (or the defaults), then ``--set``, then the options given."""
    from legorl.config import RunConfig

    # an option left unset (None) must not hide the same field given with --set
    return RunConfig.load(config, **{**overrides(set_), **{k: v for k, v in more.items() if v is not None}})


def suite_fields(suite: str | None, repos: list[str] | None, instances: list[str] | None) -> dict[str, object]:
    """``--suite/--repos/--instances`` as RunConfig fields (only those given)."""
    from legorl.tasks.cli import split_list

    fields: dict[str, object] = {}
    if suite is not None:
        fields["suite"] = suite
    if repos:
        fields["task_repos"] = split_list(repos)
    if instances:
        fields["task_ids"] = split_list(instances)
    return fields
