"""The `legorl` command line: the Typer ``app`` (the console script ``legorl = legorl.cli:app``) with
every command registered here, in the order ``legorl --help`` lists them. Each family lives in its own
module; heavy imports (torch, transformers) happen inside commands so that `legorl --help` answers
instantly. Errors take one path: :class:`legorl.cli.errors.OneLineErrors`."""

from __future__ import annotations

import os

import typer

from legorl.cli import bench, data, models, run
from legorl.cli import eval as eval_
from legorl.cli.errors import OneLineErrors
from legorl.observe import cli as observe_cli
from legorl.sandbox.cli import app as images_app
from legorl.tasks.cli import app as tasks_app

__all__ = ["app"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a model hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    help="LEGO-RL: RL for coding agents inside real harnesses.",
)
# Sub-command groups: their own modules here, or the package they belong to (tasks, images).
app.add_typer(models.app, name="models")
app.add_typer(bench.app, name="bench")
app.add_typer(tasks_app, name="tasks")
app.add_typer(images_app, name="images")
tasks_app.command("filter")(eval_.tasks_filter)

app.command("ui")(observe_cli.ui)
app.command("status")(observe_cli.status)
app.command("control")(observe_cli.control)
app.command("validate")(observe_cli.validate)
app.command("launch")(observe_cli.launch)
app.command()(run.demo)
app.command()(run.train)
app.command("eval")(eval_.eval_cmd)
app.command("sft")(data.sft_cmd)
app.command("export-hf")(data.export_hf_cmd)
app.command()(run.gateway)
app.command("export")(data.export)
app.command("grade")(data.grade_predictions)
app.command("rollout")(data.rollout_cmd)
