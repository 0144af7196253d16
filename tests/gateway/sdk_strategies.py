"""Hypothesis strategies for hostile-but-plausible requests, built from the official SDKs' request
types (the TypedDicts of ``openai.types.chat.completion_create_params``,
``anthropic.types.message_create_params``, ``openai.types.responses.response_create_params``, and
``google.genai.types``' ``ContentDict`` / ``PartDict`` / ``GenerationConfigDict`` / ``ToolDict``...,
whose snake_case keys the Gemini strategy sends as drawn or in the wire's lowerCamelCase).

:func:`from_typed_dict` walks a TypedDict's annotations (``Required`` / ``NotRequired``, ``Literal``,
unions, ``Iterable`` / ``List`` / ``SequenceNotStr``, ``Dict``, nested TypedDicts) into a strategy
that draws a dict of that shape. Every string is drawn from :data:`TEXT`, which mixes ordinary text
with lone UTF-16 surrogates, NUL and other control characters, line separators, the renderer's own
markup and special-token literals; ids (``tool_use_id``, ``tool_call_id``, ``call_id``, ``id``)
come from a small pool so that tool results sometimes answer a call and sometimes none (orphans);
a few numeric fields are drawn around their valid ranges so that many requests reach the engine.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

from hypothesis import strategies as st

try:  # typing_extensions' Required/NotRequired/Annotated are the ones the SDKs use
    import typing_extensions as tx
except ImportError:  # pragma: no cover
    tx = typing  # type: ignore[misc]

# Lone surrogates of both halves, NUL and C0/C1 controls, Unicode line breaks, the replacement char,
# renderer markup and special-token literals, an astral character (a valid surrogate *pair* in JSON).
ODD = [
    "\ud800",
    "\udbff",
    "\udc00",
    "\udfff",
    "\x00",
    "\x01",
    "\x07",
    "\x1b",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\ufffd",
    "\ufeff",
    "<tool_call>",
    "</tool_call>",
    "<|im_end|>",
    "<|im_start|>",
    "\U0001f600",
    "\t",
    "\n",
    " ",
]
TEXT = st.one_of(
    st.text(max_size=12),
    st.lists(st.one_of(st.sampled_from(ODD), st.text(max_size=4)), max_size=5).map("".join),
)
IDS = st.one_of(st.sampled_from(["call_1", "call_2", "toolu_1", "toolu_2", ""]), TEXT)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3),
    max_leaves=6,
)
SCHEMA = st.one_of(
    st.just({"type": "object", "properties": {"cmd": {"type": "string"}}}), st.dictionaries(TEXT, JSON, max_size=2)
)

# Values by field name, wherever the field appears (the rest follows the SDK's annotation).
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "max_tokens": st.integers(0, 12),
    "max_completion_tokens": st.integers(0, 12),
    "max_output_tokens": st.integers(0, 12),
    "temperature": st.floats(0, 2.2),
    "top_p": st.floats(0, 1.1),
    "top_k": st.integers(0, 5),
    "n": st.integers(0, 2),
    "seed": st.integers(0, 2**31),
    "stream": st.booleans(),
    "model": st.one_of(st.just("m"), TEXT),
    "id": IDS,
    "tool_use_id": IDS,
    "tool_call_id": IDS,
    "call_id": IDS,
    "name": st.one_of(st.just("bash"), TEXT),
    "input_schema": SCHEMA,
    "parameters": SCHEMA,
    "arguments": st.one_of(st.just('{"cmd": "ls"}'), TEXT),
    "previous_response_id": st.one_of(st.just("resp_missing"), TEXT),
}
MAX_DEPTH = 7


def _strip(tp: Any) -> Any:
    """Annotated[X, ...], Required[X], NotRequired[X] -> X."""
    while True:
        origin = typing.get_origin(tp)
        if origin in (typing.Annotated, tx.Annotated):
            tp = typing.get_args(tp)[0]
        elif origin in (
            tx.Required,
            tx.NotRequired,
            getattr(typing, "Required", None),
            getattr(typing, "NotRequired", None),
        ):
            tp = typing.get_args(tp)[0]
        else:
            return tp


def _is_required(td: Any, tp: Any) -> bool:
    """Required[...] / NotRequired[...] decide, else the TypedDict's totality (the SDK modules use
    postponed annotations, so ``__required_keys__`` does not see their ``Required`` markers)."""
    while typing.get_origin(tp) in (typing.Annotated, tx.Annotated):
        tp = typing.get_args(tp)[0]
    origin = typing.get_origin(tp)
    if origin in (tx.Required, getattr(typing, "Required", None)):
        return True
    if origin in (tx.NotRequired, getattr(typing, "NotRequired", None)):
        return False
    return bool(getattr(td, "__total__", True))


def for_type(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy for one SDK annotation."""
    tp = _strip(tp)
    if tp is str:
        return TEXT
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-2, 40)
    if tp is float:
        return st.floats(-1, 3, allow_nan=False)
    if tp is type(None) or tp is None:
        return st.none()
    if tp is object or tp is Any:
        return JSON
    if tx.is_typeddict(tp):
        return from_typed_dict(tp, depth=depth + 1)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Literal, tx.Literal):
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([for_type(a, depth) for a in args])
    if depth > MAX_DEPTH:
        return st.none()
    if (
        origin in (list, collections.abc.Iterable, collections.abc.Sequence)
        or (isinstance(origin, type) and origin.__name__ == "SequenceNotStr")
        or getattr(tp, "__name__", "") == "SequenceNotStr"
    ):
        inner = args[0] if args else str
        return st.lists(for_type(inner, depth + 1), max_size=3)
    if origin in (dict, collections.abc.Mapping):
        return st.dictionaries(TEXT, JSON, max_size=2)
    return st.none()  # bytes, files, httpx types: nothing a JSON client would send


def from_typed_dict(
    td: Any,
    *,
    depth: int = 0,
    keys: collections.abc.Collection[str] | None = None,
    extra: dict[str, st.SearchStrategy[Any]] | None = None,
    overrides: dict[str, st.SearchStrategy[Any]] | None = None,
    require: collections.abc.Collection[str] = (),
) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts shaped like the TypedDict ``td``: every required key, each optional key maybe.
    ``keys``: the optional keys to draw (default all); ``extra``: more keys, optional;
    ``overrides``: strategies for some of ``td``'s own keys; ``require``: optional keys always drawn."""
    hints = typing.get_type_hints(td, include_extras=True)
    overrides = overrides or {}

    def field(k: str) -> st.SearchStrategy[Any]:
        if k in overrides:
            return overrides[k]
        return FIELDS[k] if k in FIELDS else for_type(hints[k], depth)

    required = {k: field(k) for k in hints if _is_required(td, hints[k]) or k in (require or ())}
    optional = {k: field(k) for k in hints if k not in required and (keys is None or k in keys) and depth <= MAX_DEPTH}
    optional.update(extra or {})
    return st.fixed_dictionaries(required, optional=optional)


def chat_conversations() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Tool-calling conversations from the SDK's message types: a user turn, then rounds of an
    assistant message with tool calls and tool messages answering (or not) by id."""
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionToolMessageParam,
        ChatCompletionUserMessageParam,
    )

    user = from_typed_dict(ChatCompletionUserMessageParam, keys=())
    call = from_typed_dict(ChatCompletionMessageFunctionToolCallParam, keys=())
    assistant = from_typed_dict(
        ChatCompletionAssistantMessageParam,
        keys={"content"},
        overrides={"tool_calls": st.lists(call, min_size=1, max_size=2)},
        extra={"tool_calls": st.just([])},
    )
    tool = from_typed_dict(ChatCompletionToolMessageParam, keys=())
    rounds = st.lists(st.tuples(assistant, st.lists(tool, max_size=2)), max_size=2)
    return st.tuples(user, rounds, st.lists(user, max_size=1)).map(
        lambda t: [t[0], *[m for a, tools in t[1] for m in (a, *tools)], *t[2]]
    )


def anthropic_conversations() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Tool-use conversations from the SDK's block types: user text, then rounds of an assistant
    message with ``tool_use`` blocks and a user message of ``tool_result`` blocks (answering by id, or not)."""
    from anthropic.types import TextBlockParam, ToolResultBlockParam, ToolUseBlockParam

    text = from_typed_dict(TextBlockParam, keys=())
    use = from_typed_dict(ToolUseBlockParam, keys=())
    result = from_typed_dict(ToolResultBlockParam, keys={"content", "is_error"})
    first = st.fixed_dictionaries({"role": st.just("user"), "content": st.one_of(TEXT, st.lists(text, max_size=2))})
    assistant = st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.lists(use | text, min_size=1, max_size=2)}
    )
    answer = st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(result | text, max_size=2)})
    rounds = st.lists(st.tuples(assistant, answer), max_size=2)
    return st.tuples(first, rounds).map(lambda t: [t[0], *[m for pair in t[1] for m in pair]])


def responses_inputs() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Input item lists from the SDK's item types: messages, function calls and their outputs."""
    from openai.types.responses import EasyInputMessageParam, ResponseFunctionToolCallParam
    from openai.types.responses.response_input_param import FunctionCallOutput

    message = from_typed_dict(EasyInputMessageParam, keys={"type"})
    call = from_typed_dict(ResponseFunctionToolCallParam, keys=())
    output = from_typed_dict(FunctionCallOutput, keys=())
    return st.lists(message | call | output, min_size=1, max_size=4)


def chat_requests() -> st.SearchStrategy[dict[str, Any]]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsBase

    keys = {
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "stream_options",
        "tools",
        "tool_choice",
        "seed",
        "logprobs",
        "reasoning_effort",
        "parallel_tool_calls",
        "user",
    }
    hints = typing.get_type_hints(CompletionCreateParamsBase, include_extras=True)
    messages = st.one_of(for_type(hints["messages"]), chat_conversations())
    return from_typed_dict(
        CompletionCreateParamsBase, keys=keys, extra={"stream": st.booleans()}, overrides={"messages": messages}
    )


def anthropic_requests() -> st.SearchStrategy[dict[str, Any]]:
    from anthropic.types.message_create_params import MessageCreateParamsBase

    keys = {"system", "tools", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "tool_choice", "thinking"}
    hints = typing.get_type_hints(MessageCreateParamsBase, include_extras=True)
    messages = st.one_of(for_type(hints["messages"]), anthropic_conversations(), anthropic_conversations())
    return from_typed_dict(
        MessageCreateParamsBase, keys=keys, extra={"stream": st.booleans()}, overrides={"messages": messages}
    )


def responses_requests() -> st.SearchStrategy[dict[str, Any]]:
    from openai.types.responses.response_create_params import ResponseCreateParamsBase

    keys = {
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "previous_response_id",
        "metadata",
        "parallel_tool_calls",
    }
    hints = typing.get_type_hints(ResponseCreateParamsBase, include_extras=True)
    items = st.one_of(for_type(hints["input"]), responses_inputs(), responses_inputs())
    return from_typed_dict(
        ResponseCreateParamsBase,
        keys=keys,
        extra={"stream": st.booleans()},
        overrides={"input": items},
        require={"input"},
    )


def _camel(obj: Any) -> Any:
    """snake_case keys -> lowerCamelCase, recursively (free-form values such as ``args`` included:
    the gateway takes them as given either way)."""
    if isinstance(obj, dict):
        return {
            (k.split("_")[0] + "".join(w.title() for w in k.split("_")[1:]) if isinstance(k, str) else k): _camel(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_camel(v) for v in obj]
    return obj


def gemini_contents() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Function-calling conversations from the SDK's part types: a user turn, then rounds of a model turn
    with function calls (and maybe text) and a user turn of function responses (as many as the calls,
    or not), sometimes a whole drawn ``PartDict`` (several data fields, none, or unsupported ones)."""
    from google.genai.types import FunctionCallDict, FunctionResponseDict, PartDict

    text = st.fixed_dictionaries({"text": st.one_of(st.just("hi"), TEXT)})
    args = st.one_of(st.just({"cmd": "ls"}), st.dictionaries(TEXT, JSON, max_size=2))
    output = st.one_of(st.just({"output": "a.py"}), st.dictionaries(TEXT, JSON, max_size=2))
    call = st.fixed_dictionaries(
        {
            "function_call": from_typed_dict(
                FunctionCallDict, keys={"id", "args"}, overrides={"args": args}, require={"name"}
            )
        }
    )
    answer = st.fixed_dictionaries(
        {
            "function_response": from_typed_dict(
                FunctionResponseDict,
                keys={"id", "response"},
                overrides={"response": output},
                require={"name", "response"},
            )
        }
    )
    odd = from_typed_dict(PartDict, keys={"text", "thought", "inline_data", "function_call", "executable_code"})

    def content(role: str, parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        return st.fixed_dictionaries({"role": st.just(role), "parts": st.lists(parts, min_size=1, max_size=2)})

    first = content("user", text | odd)
    model = content("model", call | text | odd)
    user = content("user", answer | text)
    rounds = st.lists(st.tuples(model, user), max_size=2)
    return st.tuples(first, rounds).map(lambda t: [t[0], *[c for pair in t[1] for c in pair]])


def gemini_requests() -> st.SearchStrategy[dict[str, Any]]:
    """``generateContent`` bodies (``stream``: which method the test calls; not sent)."""
    from google.genai.types import ContentDict, FunctionCallingConfigDict, FunctionDeclarationDict, GenerationConfigDict

    generation = from_typed_dict(
        GenerationConfigDict,
        overrides={"candidate_count": st.integers(0, 2)},
        keys={
            "temperature",
            "top_p",
            "top_k",
            "candidate_count",
            "max_output_tokens",
            "stop_sequences",
            "seed",
            "response_logprobs",
            "presence_penalty",
        },
    )
    declaration = from_typed_dict(
        FunctionDeclarationDict, keys={"description", "parameters_json_schema"}, require={"name"}
    )
    tool = st.fixed_dictionaries({"function_declarations": st.lists(declaration, max_size=2)})
    tool_config = st.fixed_dictionaries(
        {
            "function_calling_config": from_typed_dict(
                FunctionCallingConfigDict,
                keys={"mode", "allowed_function_names"},
                overrides={"mode": st.one_of(st.sampled_from(["AUTO", "ANY", "NONE", "VALIDATED"]), TEXT)},
            )
        }
    )
    role = st.one_of(st.sampled_from(["user", "model"]), TEXT)
    raw = st.lists(from_typed_dict(ContentDict, overrides={"role": role}), max_size=3)
    contents = st.one_of(raw, gemini_contents(), gemini_contents())
    body = st.fixed_dictionaries(
        {"contents": contents},
        optional={
            "system_instruction": from_typed_dict(ContentDict, keys={"parts"}),
            "generation_config": generation,
            "tools": st.lists(tool, max_size=2),
            "tool_config": tool_config,
        },
    )
    return st.tuples(body, st.booleans(), st.booleans()).map(
        lambda t: {**(_camel(t[0]) if t[1] else t[0]), "stream": t[2]}
    )


# --------------------------------------------------------------------------- what a body holds


def has_lone_surrogate(obj: Any) -> bool:
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(obj, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in obj.items())
    if isinstance(obj, list):
        return any(has_lone_surrogate(v) for v in obj)
    return False


def orphan_tool_result(dialect: str, body: dict[str, Any]) -> bool:
    """Does the conversation hold a tool result that answers no call before it (the dialect's rule)?"""
    if dialect == "anthropic":
        prev: set[Any] = set()
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
            if m.get("role") == "user" and any(
                b.get("type") == "tool_result" and b.get("tool_use_id") not in prev for b in blocks
            ):
                return True
            prev = (
                {b.get("id") for b in blocks if b.get("type") == "tool_use"} if m.get("role") == "assistant" else set()
            )
        return False
    if dialect == "chat":
        calls: set[Any] = set()
        for m in body.get("messages") or []:
            if m.get("role") == "tool" and m.get("tool_call_id") not in calls:
                return True
            if m.get("role") == "assistant":
                calls = {c.get("id") for c in m.get("tool_calls") or [] if isinstance(c, dict)}
        return False
    if dialect == "gemini":
        return gemini_orphan_response(body)
    seen: set[Any] = set()
    items = body.get("input")
    for it in items if isinstance(items, list) else []:
        if isinstance(it, dict) and it.get("type") == "function_call":
            seen.add(it.get("call_id"))
        if isinstance(it, dict) and it.get("type") == "function_call_output" and it.get("call_id") not in seen:
            return True
    return False


def gemini_orphan_response(body: dict[str, Any]) -> bool:
    """Does a turn of function responses follow anything but a model turn with that many calls?"""

    def count(content: Any, kind: str) -> int:
        parts = content.get("parts") if isinstance(content, dict) else None
        snake = "function_" + kind
        camel = "function" + kind.title()
        return sum(1 for p in parts or [] if isinstance(p, dict) and (p.get(snake) or p.get(camel)) is not None)

    prev: Any = None
    for c in body.get("contents") or []:
        answers = count(c, "response")
        if answers and isinstance(c, dict) and c.get("role") != "model":
            calls = count(prev, "call") if isinstance(prev, dict) and prev.get("role") == "model" else 0
            if answers != calls:
                return True
        prev = c
    return False
