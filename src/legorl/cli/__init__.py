"""The `legorl` command line: the Typer ``app`` with every command registered here (the console
script ``legorl = legorl.cli:main`` runs it under jemalloc where the machine has it,
:mod:`legorl.allocator`), in the order ``legorl --help`` lists them. Each family lives in its own
module; heavy imports (torch, transformers) happen inside commands so that `legorl --help` answers
instantly. Errors take one path: :class:`legorl.cli.errors.OneLineErrors`."""

from __future__ import annotations

import os

import typer

from legorl.allocator import reexec_with_jemalloc
from legorl.cli import bench, data, models, run
from legorl.cli import eval as eval_
from legorl.cli.errors import OneLineErrors, error_line, one_line
from legorl.errors import LegoRLError
from legorl.observe import cli as observe_cli
from legorl.sandbox.cli import app as images_app
from legorl.tasks.cli import app as tasks_app

__all__ = ["app", "main"]

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


def main() -> None:
    """The `legorl` program: this process again under jemalloc (once, when the settings and the
    machine allow), then the app. Tests call ``app`` itself and stay in their own process."""
    try:
        reexec_with_jemalloc()
    except LegoRLError as exc:  # a bad LEGORL_ALLOCATOR
        error_line(one_line(exc), 2)
    app()
