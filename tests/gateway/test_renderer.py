"""Renderer: chat template prompt ids, stop ids, output decoding, Hermes tool format."""

from __future__ import annotations

import json

import pytest

from legorl.errors import InvalidRequestError
from legorl.gateway.renderer import (
    ChatTemplateRenderer,
    Renderer,
    format_tool_call,
    load_smollm2_gguf_tokenizer,
    message_key,
    normalize_message,
    normalize_messages,
    normalize_tools,
    parse_tool_calls,
    returned_unchanged,
)

TOOLS = normalize_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a shell command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
            },
        }
    ]
)


@pytest.fixture(scope="module")
def tok():
    return load_smollm2_gguf_tokenizer()


@pytest.fixture(scope="module")
def r(tok):
    return ChatTemplateRenderer(tok)


def _ids(x):
    return list(x["input_ids"]) if hasattr(x, "keys") else list(x)


@pytest.mark.parametrize(
    "conv",
    [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "  two\n\nlines  "}],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "héllo 👋 <b>x</b>"},
        ],
    ],
)
def test_prompt_ids_equal_tokenize_true_path(r, tok, conv):
    assert isinstance(r, Renderer)
    ids = r.render_prompt(normalize_messages(conv))
    assert ids == _ids(tok.apply_chat_template(conv, tokenize=True, add_generation_prompt=True))
    assert r.decode(ids).endswith("<|im_start|>assistant\n")


def test_stop_ids(r, tok):
    assert tok.convert_tokens_to_ids("<|im_end|>") in r.stop_token_ids
    assert tok.convert_tokens_to_ids("<|endoftext|>") in r.stop_token_ids


def test_parse_output_strips_stop_token(r, tok):
    ids = tok.encode("Hello there.", add_special_tokens=False)
    p = r.parse_output(ids + [tok.convert_tokens_to_ids("<|im_end|>")])
    assert p.content == "Hello there." and p.stopped and not p.tool_calls
    p2 = r.parse_output(ids)  # cut by max_tokens
    assert p2.content == "Hello there." and not p2.stopped


def test_bridge_closes_turn(r, tok):
    end = tok.convert_tokens_to_ids("<|im_end|>")
    ids = tok.encode("x", add_special_tokens=False)
    assert r.bridge_text(ids + [end]) == "\n"
    assert r.bridge_text(ids) == "<|im_end|>\n"


def test_tool_prompt_in_system_message(r):
    text = r.render_text(normalize_messages([{"role": "user", "content": "go"}]), TOOLS)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '"name": "bash"' in text and "<tools>" in text and "</tools>" in text
    assert "You are a helpful AI assistant named SmolLM" not in text
    with_sys = r.render_text(
        normalize_messages([{"role": "system", "content": "SYS"}, {"role": "user", "content": "go"}]), TOOLS
    )
    assert with_sys.startswith("<|im_start|>system\nSYS\n\n# Tools")


def test_tool_calls_and_results_render_back(r):
    conv = normalize_messages(
        [
            {"role": "user", "content": "list"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}},
                    {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"pwd"}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "tool", "tool_call_id": "c2", "content": "/w"},
        ]
    )
    text = r.render_text(conv, TOOLS)
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "bash", "arguments": {"cmd": "pwd"}}\n</tool_call><|im_end|>\n'
    ) in text
    # consecutive tool results share one user turn
    assert (
        "<|im_start|>user\n<tool_response>\na.py\n</tool_response>\n<tool_response>\n/w\n</tool_response><|im_end|>\n"
        in text
    )
    assert text.endswith("<|im_start|>assistant\n")


def test_parse_tool_calls_tolerant():
    good = format_tool_call("bash", {"cmd": "ls -la"})
    text = f'Let me look.\n{good}\nthen <tool_call>{{not json</tool_call> and <tool_call>\n{{"name": "edit", "arguments": "{{\\"path\\": \\"a\\"}}"}}'
    content, calls, unparsed = parse_tool_calls(text)
    assert [c.name for c in calls] == ["bash", "edit"]
    assert calls[0].arguments == {"cmd": "ls -la"}
    assert calls[1].arguments == {"path": "a"}  # JSON string arguments + unclosed final block
    assert unparsed == 1 and "<tool_call>{not json</tool_call>" in content
    assert content.startswith("Let me look.")
    # junk inside the block around the JSON object
    _, calls, unparsed = parse_tool_calls('<tool_call>sure: {"name": "x", "arguments": {}} ok</tool_call>')
    assert [c.name for c in calls] == ["x"] and unparsed == 0
    # missing name -> unparsed, stays as text
    content, calls, unparsed = parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>')
    assert calls == [] and unparsed == 1 and "<tool_call>" in content


def test_parse_output_with_tool_call(r, tok):
    text = "ok " + format_tool_call("bash", {"cmd": "ls"})
    ids = tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    p = r.parse_output(ids)
    assert p.content == "ok" and p.tool_calls[0].name == "bash" and p.unparsed_tool_calls == 0
    msg = p.message()
    assert msg["tool_calls"][0]["arguments"] == {"cmd": "ls"}
    assert json.loads(p.tool_calls[0].arguments_json()) == {"cmd": "ls"}


def test_message_normalisation_and_key():
    a = normalize_message(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "hi "}],
            "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": '{"b": 1, "a": 2}'}}],
        }
    )
    b = normalize_message(
        {"role": "assistant", "content": "hi", "tool_calls": [{"id": "zz", "name": "f", "arguments": {"a": 2, "b": 1}}]}
    )
    assert message_key(a) == message_key(b)
    assert normalize_message({"role": "developer", "content": "x"})["role"] == "system"
    with pytest.raises(InvalidRequestError):
        normalize_message({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})
    with pytest.raises(InvalidRequestError):
        normalize_message({"role": "wizard", "content": "x"})


@pytest.mark.parametrize(
    "value",
    ["NaN", "-Infinity", "1e999", '"\\ud800"', "[" * 65 + "]" * 65, "[" * 1100 + "]" * 1100],
    ids=["nan", "-inf", "overflow", "lone-surrogate", "depth-65", "depth-1100"],
)
def test_tool_call_json_a_client_cannot_take_back_stays_text(value):
    # Starlette's JSON response refuses NaN/inf, a lone surrogate cannot be encoded as UTF-8, the
    # Anthropic SDK's parser gives up past ~200 levels: none of them may reach the wire as a call
    block = '<tool_call>\n{"name": "bash", "arguments": {"v": ' + value + "}}\n</tool_call>"
    for text in (block, block.replace('{"v": ' + value + "}", json.dumps(json.dumps({"v": 0})).replace("0", value))):
        content, calls, unparsed = parse_tool_calls("ok " + text)
        assert calls == [] and unparsed == 1 and content == ("ok " + text).strip()
    _, calls, _ = parse_tool_calls(
        '<tool_call>{"name": "bash", "arguments": {"v": ' + "[" * 62 + "]" * 62 + "}}</tool_call>"
    )
    assert len(calls) == 1  # 64 levels (the block's object, the arguments, 62 lists) are fine


def test_returned_unchanged_tells_echo_from_respelling():
    returned = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [{"id": "c", "name": "bash", "arguments": {"cmd": "ls", "n": 1.0}}],
    }

    def chat(arguments, content="Let me look."):
        return normalize_message(
            {
                "role": "assistant",
                "content": content,
                "tool_calls": [
                    {"id": "other", "type": "function", "function": {"name": "bash", "arguments": arguments}}
                ],
            }
        )

    assert returned_unchanged(returned, chat('{"cmd": "ls", "n": 1.0}'))  # the string as returned
    assert chat('{"cmd": "ls", "n": 1.0}')["tool_calls"][0]["raw_arguments"] == '{"cmd": "ls", "n": 1.0}'
    assert not returned_unchanged(returned, chat('{"cmd":"ls","n":1.0}'))  # compacted
    assert not returned_unchanged(returned, chat('{"n": 1.0, "cmd": "ls"}'))  # keys reordered
    assert not returned_unchanged(returned, chat('{"cmd": "ls", "n": 1.0}', content="Let me look. "))
    # parsed arguments (Anthropic tool_use.input): same value, same key order, same number spelling
    anth = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [{"id": "t", "name": "bash", "arguments": {"cmd": "ls", "n": 1.0}}],
    }
    assert returned_unchanged(returned, anth)
    assert not returned_unchanged(
        returned, {**anth, "tool_calls": [{"id": "t", "name": "bash", "arguments": {"cmd": "ls", "n": 1}}]}
    )
    assert not returned_unchanged(returned, {**anth, "tool_calls": []})
