"""Ready-to-paste environment lines for clients of a running gateway (``legorl gateway`` prints them).

For the OpenAI and Anthropic SDKs and for every harness of the registry
(:data:`legorl.harnesses.registry.HARNESS_NAMES`): where the harness adapter knows its own settings
(Claude Code's and OpenCode's quiet environment, OpenCode's provider config) they come from the
adapter, so the printed lines and a rollout's sandbox agree. Lines are ``export NAME=value`` with
shell quoting; a harness configured on its command line gets a comment with the options.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

# Settings a sandbox needs that would break the user's own shell (npm pointed at a dead registry).
SANDBOX_ONLY = frozenset({"npm_config_registry"})


@dataclass(frozen=True)
class ClientEnv:
    """How one client reaches the gateway: environment variables plus an optional usage note."""

    client: str
    env: dict[str, str]
    note: str = ""
    extra: list[str] = field(default_factory=list)  # more comment lines (command-line options)


def client_envs(root_url: str, api_key: str, model: str) -> list[ClientEnv]:
    """Every client's settings for a gateway at ``root_url`` (``http://127.0.0.1:PORT``, no ``/v1``)."""
    from legorl.harnesses.base import Budget
    from legorl.harnesses.claude_code import QUIET_ENV as CLAUDE_QUIET
    from legorl.harnesses.opencode import QUIET_ENV as OPENCODE_QUIET
    from legorl.harnesses.opencode import OpenCodeHarness
    from legorl.harnesses.registry import HARNESS_NAMES

    root = root_url.rstrip("/").removesuffix("/v1")
    v1 = root + "/v1"
    openai_env = {"OPENAI_BASE_URL": v1, "OPENAI_API_KEY": api_key}
    litellm_note = f"model name openai/{model} (LiteLLM's OpenAI provider)"
    budget = Budget()
    harness: dict[str, ClientEnv] = {
        "minimal": ClientEnv("minimal", openai_env, "python -m legorl.harnesses.minimal_agent --issue-file FILE"),
        "line-fix": ClientEnv("line-fix", openai_env, "python -m legorl.harnesses.line_agent --issue-file FILE"),
        "command": ClientEnv("command", openai_env, "any program reading $OPENAI_BASE_URL / $OPENAI_API_KEY"),
        "mini-swe-agent": ClientEnv(
            "mini-swe-agent",
            {
                "OPENAI_API_KEY": api_key,
                "MSWEA_CONFIGURED": "true",
                "MSWEA_COST_TRACKING": "ignore_errors",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            },
            litellm_note,
            [f"mini --model openai/{model} -c mini.yaml -c model.model_kwargs.api_base={v1}"],
        ),
        "openhands": ClientEnv(
            "openhands",
            {"OPENAI_API_KEY": api_key, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            litellm_note,
            [f'LLM(model="openai/{model}", base_url="{v1}", api_key=os.environ["OPENAI_API_KEY"])'],
        ),
        "claude-code": ClientEnv(
            "claude-code",
            {
                **CLAUDE_QUIET,
                "ANTHROPIC_BASE_URL": root,
                "ANTHROPIC_AUTH_TOKEN": api_key,
                "ANTHROPIC_MODEL": model,
                "ANTHROPIC_SMALL_FAST_MODEL": model,
            },
            "Anthropic Messages; claude -p TASK",
        ),
    }
    for name in ("opencode", "opencode-responses"):
        config = OpenCodeHarness(name).config(v1, api_key, budget)
        quiet = {k: v for k, v in OPENCODE_QUIET.items() if k not in SANDBOX_ONLY}
        harness[name] = ClientEnv(
            name,
            {**quiet, "OPENCODE_CONFIG_CONTENT": json.dumps(config)},
            "Responses API" if name.endswith("responses") else "Chat Completions",
        )
    harness["codex"] = codex_client_env(v1, api_key, model)
    harness["gemini-cli"] = gemini_cli_client_env(root, api_key, model)
    harness["aider"] = aider_client_env(v1, api_key, model)
    harness["qwen-code"] = qwen_code_client_env(v1, api_key, model)
    missing = [n for n in HARNESS_NAMES if n not in harness]
    if missing:  # a harness added to the registry must say how it is pointed at a gateway
        raise KeyError(f"no client environment for harness(es) {', '.join(missing)}")
    return [
        ClientEnv("OpenAI SDK", openai_env, "Chat Completions and Responses"),
        ClientEnv("Anthropic SDK", {"ANTHROPIC_BASE_URL": root, "ANTHROPIC_API_KEY": api_key}, "Messages"),
        *(harness[n] for n in HARNESS_NAMES),
    ]


def codex_client_env(v1: str, api_key: str, model: str) -> ClientEnv:
    """Codex CLI: the adapter's provider table as ``-c`` overrides (TOML inline tables)."""
    from legorl.harnesses.codex import PROVIDER_ID, TOKEN_ENV, CodexHarness

    provider = CodexHarness().config(v1)["model_providers"][PROVIDER_ID]
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in provider.items())
    args = f"-c model={shlex.quote(json.dumps(model))} -c model_provider={PROVIDER_ID} -c {shlex.quote(f'model_providers.{PROVIDER_ID}={{{inline}}}')}"
    return ClientEnv("codex", {TOKEN_ENV: api_key}, "Responses API", [f"codex exec {args} TASK"])


def gemini_cli_client_env(root: str, api_key: str, model: str) -> ClientEnv:
    """Gemini CLI: the adapter's environment; its auth type is a setting (the one it would infer
    from the base URL, ``gateway``, its headless auth check refuses)."""
    from legorl.harnesses.gemini_cli import GeminiCliHarness

    env = GeminiCliHarness(model=model).environment(root, api_key)
    env.pop("PATH")  # the sandbox's; the user's own gemini is on theirs
    auth = json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    return ClientEnv("gemini-cli", env, "Gemini API", [f"~/.gemini/settings.json: {auth}", "gemini --prompt=TASK"])


def aider_client_env(v1: str, api_key: str, model: str) -> ClientEnv:
    """aider: LiteLLM's OpenAI provider from the environment, the adapter's quiet variables and options."""
    from legorl.harnesses.aider import AiderHarness

    aider = AiderHarness(model=model)
    private = ("--message-file", "--env-file", "--model-", "--chat-history-file", "--input-history-file")
    options = [a for a in aider.argv()[4:] if not a.startswith(private)]  # the sandbox's own files left out
    note = f"model name openai/{model} (LiteLLM's OpenAI provider)"
    return ClientEnv("aider", aider.env(v1, api_key), note, [f"aider {' '.join(options)} --message TASK"])


def qwen_code_client_env(v1: str, api_key: str, model: str) -> ClientEnv:
    """Qwen Code: the adapter's environment (OpenAI auth); it needs Node >= 22."""
    from legorl.harnesses.base import Budget
    from legorl.harnesses.qwen_code import QwenCodeHarness

    env = QwenCodeHarness(model=model).environment(v1, api_key, Budget())
    env.pop("PATH")  # the sandbox's Node 22; the user's own qwen is on theirs
    return ClientEnv(
        "qwen-code", env, "Chat Completions", ["qwen --auth-type=openai --approval-mode=yolo --prompt=TASK"]
    )


def format_client_envs(envs: list[ClientEnv]) -> str:
    """Shell lines: a comment per client, then ``export NAME=value`` lines."""
    lines: list[str] = []
    for e in envs:
        lines.append(f"# {e.client}" + (f" — {e.note}" if e.note else ""))
        lines += [f"#   {x}" for x in e.extra]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in e.env.items()]
    return "\n".join(lines)
