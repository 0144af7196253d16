"""What an exec sees inside a sandbox, whatever the backend: where LEGO-RL's mounts are, the command
it runs (behind the gateway forwarder when the sandbox has a gateway), its working directory and its
environment. The workspace, home and user are in :mod:`legorl.sandbox.base`.

Nothing of the caller's environment reaches an exec: it gets ``PATH``, ``HOME`` and ``LANG``, the env
layer's ``PATH``/``PYTHONPATH``, then the sandbox's ``spec.env``, then the exec's own variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from legorl.errors import SandboxError
from legorl.sandbox.base import SANDBOX_HOME, WORKSPACE, SandboxSpec

GATEWAY_SOCKET_INSIDE = "/run/legorl/gateway.sock"  # the gateway's Unix socket, bind-mounted
ENV_INSIDE = "/run/legorl/env"  # the env layer (legorl.sandbox.images), read-only
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# legorl.sandbox.forwarder on the host: run inside with -I -S, so it must import nothing of LEGO-RL
FORWARDER_PATH = Path(__file__).resolve().with_name("forwarder.py")


def inner_command(cmd: list[str] | str, spec: SandboxSpec, *, python: str, forwarder: str) -> list[str]:
    """What an exec runs inside: ``cmd`` (a string goes to ``bash -c``), behind the gateway forwarder
    (``forwarder``, run by ``python``) when the sandbox has a gateway."""
    argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise SandboxError("empty command")
    if spec.gateway_socket is not None:
        argv = [
            python,
            "-I",
            "-S",
            forwarder,
            "--socket",
            GATEWAY_SOCKET_INSIDE,
            "--port",
            str(spec.gateway_port),
            "--",
            *argv,
        ]
    return argv


def inside_cwd(cwd: str) -> str:
    """An exec's working directory: relative ones are relative to :data:`WORKSPACE`."""
    return cwd if cwd.startswith("/") else f"{WORKSPACE}/{cwd}"


def exec_env(
    spec: SandboxSpec,
    extra: Mapping[str, str] | None,
    *,
    env_layer: bool,
    path: str = SYSTEM_PATH,
    lang: str = "C.UTF-8",
) -> dict[str, str]:
    """An exec's whole environment: ``PATH``, ``HOME`` (:data:`SANDBOX_HOME`), ``LANG``, the env layer's
    ``PATH``/``PYTHONPATH`` when there is one (after the recipe's ``python_path``: the repository's
    import root), then ``spec.env``, then the exec's ``extra``."""
    env = {"PATH": path, "HOME": SANDBOX_HOME, "LANG": lang}
    if env_layer:
        env["PATH"] = f"{ENV_INSIDE}/bin:{path}"
        first = tuple(getattr(spec.env_recipe, "python_path", ()) or ())
        env["PYTHONPATH"] = ":".join([*first, f"{ENV_INSIDE}/site-packages"])
    env.update(spec.env)
    env.update(extra or {})
    return env


__all__ = [
    "ENV_INSIDE",
    "FORWARDER_PATH",
    "GATEWAY_SOCKET_INSIDE",
    "SYSTEM_PATH",
    "exec_env",
    "inner_command",
    "inside_cwd",
]
