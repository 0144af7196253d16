"""``legorl gateway``'s client environment lines (legorl.harnesses.client_env)."""

from __future__ import annotations

import json
import shlex

from legorl.harnesses.client_env import client_envs, format_client_envs
from legorl.harnesses.registry import HARNESS_NAMES


def test_every_client_and_harness_gets_pasteable_lines():
    envs = client_envs("http://127.0.0.1:8000", "legorl-" + "a" * 48, "smollm2-135m")
    by = {e.client: e.env for e in envs}
    assert set(HARNESS_NAMES) | {"OpenAI SDK", "Anthropic SDK"} == set(by)
    assert by["OpenAI SDK"] == {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "legorl-" + "a" * 48}
    assert by["Anthropic SDK"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000"  # the SDK appends /v1 itself
    assert by["claude-code"]["ANTHROPIC_AUTH_TOKEN"].startswith("legorl-")
    cfg = json.loads(by["opencode"]["OPENCODE_CONFIG_CONTENT"])
    assert cfg["provider"]["legorl"]["options"]["baseURL"] == "http://127.0.0.1:8000/v1"
    assert "npm_config_registry" not in by["opencode"]  # sandbox-only: it would break the user's npm
    text = format_client_envs(envs)
    for line in text.splitlines():  # every line is a comment or one export a POSIX shell reads back
        assert line.startswith("#") or (line.startswith("export ") and len(shlex.split(line)) == 2), line
