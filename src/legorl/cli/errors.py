"""The CLI's one error path: :class:`OneLineErrors` prints every command's errors; commands raise."""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from typer._click.exceptions import NoArgsIsHelpError  # typer vendors click; it exports no public name for this
from typer.core import TyperGroup

from legorl.errors import ConfigError, LegoRLError


def one_line(exc: BaseException | str) -> str:
    """An error's message on one line (a multi-line message, e.g. a build's output tail, joined by ' | ')."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " | ".join(lines) or type(exc).__name__


class OneLineErrors(TyperGroup):
    """The one place where every command's errors are printed: ``error: <message>`` as ONE line on
    stderr and a non-zero exit code — 2 for a :class:`LegoRLError` (bad input, a broken task, a corrupt
    run directory...), an :class:`OSError` on a path the user gave, or a usage error. Commands raise;
    they never print errors themselves. Any other exception is a bug and keeps its traceback."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except NoArgsIsHelpError as exc:  # `legorl`, `legorl tasks`: the help, as click does
            typer.echo(exc.format_message())
            sys.exit(exc.exit_code)
        except typer.TyperException as exc:  # click's usage errors (bad option value, unknown command...)
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            error_line(one_line(exc.format_message()) + hint, getattr(exc, "exit_code", 2))
        except typer.Abort:
            error_line("aborted", 1)
        except LegoRLError as exc:
            error_line(one_line(exc), 2)
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # `legorl ... | head`: the reader left, nothing to say
                sys.exit(1)
            error_line(one_line(exc), 2)
        sys.exit(rv if isinstance(rv, int) else 0)


def error_line(message: str, code: int) -> NoReturn:
    """Print ``error: <message>`` as one line on stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    sys.exit(code)


def fail(exc: Exception) -> NoReturn:
    """Hand an exception that is not a :class:`LegoRLError` (a ``ValueError`` from a library: bad user
    input) to :class:`OneLineErrors` as one: one line on stderr, exit 2. A LegoRLError needs no call:
    commands let it propagate."""
    if isinstance(exc, LegoRLError):
        raise exc
    raise ConfigError(str(exc)) from exc
