"""Gemini API (Google AI ``generativelanguage``): ``POST /{v1beta|v1|v1alpha}/models/{model}:generateContent``,
``:streamGenerateContent`` (``?alt=sse``: SSE, what the ``google-genai`` SDKs and the Gemini CLI use;
without it a JSON array of response chunks) and ``:countTokens``.

Auth: the key in ``x-goog-api-key`` (the SDKs), the ``key`` query parameter, or ``Authorization:
Bearer`` (the Gemini CLI with ``GEMINI_API_KEY_AUTH_MECHANISM=bearer``). No key: 403
``PERMISSION_DENIED``, as Google answers; an unknown or closed session token: 401 ``UNAUTHENTICATED``
(Google answers an invalid key with 400 ``API_KEY_INVALID``; here a bad key stays an auth failure, as
in the other dialects, never a "bad request").

Request (JSON field names in lowerCamelCase or, as Google's proto JSON also accepts, snake_case):
``contents`` (required, non-empty; roles ``user`` / ``model``, ``function`` accepted as ``user``;
a missing role is ``user``), parts ``text`` (``thought: true`` parts dropped), ``functionCall``
(``{id?, name, args}`` -> an assistant tool call), ``functionResponse`` (``{id?, name, response}`` -> a
``tool`` message; Google's convention: a response of only ``output`` / ``error`` keys is that text,
``error`` prefixed ``"Error: "``, any other object is its JSON), ``inlineData`` / ``fileData`` (-> ``[image
omitted]`` / ``[file omitted]``), ``executableCode`` / ``codeExecutionResult`` (-> placeholders);
text parts of one content are joined with ``""`` in ``model`` turns (stream chunks concatenate) and
``"\\n"`` in ``user`` turns and ``systemInstruction`` (-> the system message). ``tools[].functionDeclarations``
(``parametersJsonSchema`` or ``parameters``; other tools such as ``googleSearch`` are ignored),
``toolConfig.functionCallingConfig`` (``mode`` checked, then ignored: the prompt does not change, so
the held prefix stays valid), ``generationConfig``: ``temperature`` [0, 2], ``topP`` (0, 1],
``maxOutputTokens`` >= 1, ``stopSequences`` (<= 5), ``seed``, ``candidateCount`` (1 only),
``responseLogprobs`` (adds ``logprobsResult``); ``topK`` and everything else (``thinkingConfig``,
``responseMimeType``, ``safetySettings``, penalties, ``thoughtSignature`` on parts, unknown fields) is
accepted and ignored. ``cachedContent`` is refused (there is no cache whose contents could be
rendered). Validation rules: ``docs/gateway-validation.md``.

Response: ``{"candidates": [{"content": {"role": "model", "parts": [text part, functionCall parts
{id, name, args}...]}, "finishReason": "STOP" | "MAX_TOKENS", "index": 0, "avgLogprobs"}],
"usageMetadata": {"promptTokenCount", "candidatesTokenCount", "totalTokenCount",
"promptTokensDetails", "cachedContentTokenCount"?}, "modelVersion", "responseId"}`` (a function call
ends with ``STOP``, as Gemini's do).

Stream: ``data:`` lines only, each a response chunk with the same ``responseId``: text chunks as the
text is sampled (one per token when nothing streamed live), then a last chunk with the function
calls (or the last text piece, else an empty text part), ``finishReason`` and the full
``usageMetadata``. No end marker. A failure after the first chunk is a ``data:`` line holding the
error body (the SDKs raise it as an ``APIError``).

Errors: ``{"error": {"code", "message", "status", "details"?}}`` with Google's status names
(``INVALID_ARGUMENT``, ``UNAUTHENTICATED``, ``PERMISSION_DENIED``, ``NOT_FOUND``,
``RESOURCE_EXHAUSTED``, ``INTERNAL``, ``UNAVAILABLE``, ``DEADLINE_EXCEEDED``); a refused field is named
in a ``google.rpc.BadRequest`` detail, a 429 carries ``google.rpc.RetryInfo``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from legorl.errors import InvalidRequestError
from legorl.gateway.completion import legorl_info
from legorl.gateway.dialects.base import (
    INVALID_JSON,
    CoreCall,
    Dialect,
    GatewayError,
    StreamWriter,
    sse,
    text_pieces,
    validation_param,
)
from legorl.gateway.renderer import Message, normalize_tools

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request

    from legorl.gateway.completion import Completion, StreamStart
    from legorl.gateway.renderer import Renderer

DIALECT = "gemini.generate_content"
API_VERSIONS = ("v1beta", "v1", "v1alpha")
MAX_STOP_SEQUENCES = 5
# Google's rule for function names (64 characters at most)
FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,63}")
CALLING_MODES = ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED")
# a Part's oneof ``data``: exactly one of these may be set
DATA_FIELDS = (
    "text",
    "inline_data",
    "file_data",
    "function_call",
    "function_response",
    "executable_code",
    "code_execution_result",
)
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)


class _Wire(BaseModel):
    """Gemini wire models: camelCase or snake_case names, unknown fields accepted (and ignored)."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True)


class FunctionCall(_Wire):
    id: str | None = None
    name: str
    args: dict[str, Any] | None = None


class FunctionResponse(_Wire):
    id: str | None = None
    name: str
    response: dict[str, Any] | None = None


class Part(_Wire):
    text: str | None = None
    thought: bool | None = None
    inline_data: dict[str, Any] | None = None
    file_data: dict[str, Any] | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None


class Content(_Wire):
    role: str | None = None
    parts: list[Part] | None = None


class FunctionDeclaration(_Wire):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    parameters_json_schema: Any = None


class Tool(_Wire):
    function_declarations: list[FunctionDeclaration] | None = None


class FunctionCallingConfig(_Wire):
    mode: str | None = None
    allowed_function_names: list[str] | None = None


class ToolConfig(_Wire):
    function_calling_config: FunctionCallingConfig | None = None


class GenerationConfig(_Wire):
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None
    candidate_count: int | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    stop_sequences: list[str] | None = None
    seed: int | None = None
    response_logprobs: bool | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _stop_count(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(v) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences are allowed, got {len(v)}")
        return v


class GenerateContentRequest(_Wire):
    contents: list[Content] | None = None
    system_instruction: Content | None = None
    tools: list[Tool] | None = None
    tool_config: ToolConfig | None = None
    generation_config: GenerationConfig | None = None
    cached_content: str | None = None
    model: str | None = None


class CountTokensRequest(_Wire):
    contents: list[Content] | None = None
    generate_content_request: GenerateContentRequest | None = None


# --------------------------------------------------------------------------- errors


def snake_path(param: str) -> str:
    """``contents[0].functionCall`` -> ``contents[0].function_call`` (Google names fields as in the proto)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), param)


def _refuse(root: str, param: str, reason: str) -> GatewayError:
    """Google's field-violation wording: ``* GenerateContentRequest.<field>: <reason>``."""
    where = f"{root}.{param}" if param else root
    return GatewayError(400, f"* {where}: {reason}", param=param or None)


def _conversation_error(message: str) -> GatewayError:
    return GatewayError(400, message, param="contents")


def _validation_error(exc: ValidationError, root: str) -> GatewayError:
    param, kind, msg = validation_param(exc)
    param = snake_path(param)
    if kind == "missing":
        return _refuse(root, param, f"{param.rsplit('.', 1)[-1]} is not specified")
    return GatewayError(400, f"Invalid value at '{param}': {msg}", param=param or None)


# --------------------------------------------------------------------------- request -> messages


def response_text(response: dict[str, Any] | None) -> str:
    """A ``functionResponse.response`` as the tool result text (Google's convention: ``output`` is the
    function's output, ``error`` its error; any other object is the output as a whole)."""
    if not response:
        return json.dumps(response or {}, ensure_ascii=False)

    def text(v: Any) -> str:
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)

    if set(response) <= {"output", "error"}:
        out = text(response["output"]) if response.get("output") is not None else ""
        if response.get("error") is not None:
            err = text(response["error"])
            out = (out + "\n" if out else "") + (err if err.startswith("Error") else "Error: " + err)
        return out
    return json.dumps(response, ensure_ascii=False)


def _data_field(part: Part, root: str, where: str) -> str:
    """The one ``data`` field a part sets (Google refuses none or several)."""
    set_fields = [f for f in DATA_FIELDS if getattr(part, f) is not None]
    if not set_fields:
        raise _refuse(root, f"{where}.data", "required oneof field 'data' must have one initialized field")
    if len(set_fields) > 1:
        raise GatewayError(
            400,
            f"Invalid JSON payload received. Oneof field 'data' is already set. Cannot set '{to_camel(set_fields[1])}'",
            param=f"{where}.{set_fields[1]}",
        )
    return set_fields[0]


def _placeholder(kind: str, part: Part) -> str:
    if kind == "inline_data":
        mime = str((part.inline_data or {}).get("mimeType") or (part.inline_data or {}).get("mime_type") or "")
        return "[image omitted]" if mime.startswith("image/") else "[file omitted]"
    if kind == "file_data":
        return "[file omitted]"
    return f"[{kind} omitted]"


def _system_text(content: Content | None, root: str) -> str:
    if content is None:
        return ""
    texts = []
    for j, part in enumerate(content.parts or []):
        where = f"system_instruction.parts[{j}]"
        kind = _data_field(part, root, where)
        if kind in ("function_call", "function_response"):
            raise _refuse(root, where, f"{kind} is not allowed in system_instruction")
        if kind == "text":
            if not part.thought:
                texts.append(part.text or "")
        else:
            texts.append(_placeholder(kind, part))
    return "\n".join(texts)


def _model_message(content: Content, i: int, root: str, strict: bool) -> Message:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in enumerate(content.parts or []):
        where = f"contents[{i}].parts[{j}]"
        kind = _data_field(part, root, where)
        if kind == "text":
            # an empty text part is accepted here, unlike the real API: it is how the gateway ends an
            # empty generation, and a harness must be able to send back what it received
            if not part.thought:
                texts.append(part.text or "")
        elif kind == "function_call":
            fc = part.function_call
            assert fc is not None  # _data_field said so
            calls.append({"id": fc.id or "", "name": fc.name, "arguments": fc.args or {}})
        elif kind == "function_response":
            if strict:
                raise _refuse(root, where, "a function_response belongs in a user turn, not a model turn")
            texts.append(response_text(part.function_response.response if part.function_response else None))
        else:
            texts.append(_placeholder(kind, part))
    msg: Message = {"role": "assistant", "content": "".join(texts)}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user_messages(content: Content, i: int, root: str, strict: bool, call_ids: list[str]) -> list[Message]:
    """User parts -> tool messages (``functionResponse``, answering ``call_ids`` — the calls of the
    turn before — by id, else in order) and user messages (text, in order)."""
    out: list[Message] = []
    texts: list[str] = []
    answered = 0
    for j, part in enumerate(content.parts or []):
        where = f"contents[{i}].parts[{j}]"
        kind = _data_field(part, root, where)
        if kind == "text":
            if strict and part.text == "":
                raise _refuse(root, f"{where}.data", "required oneof field 'data' must have one initialized field")
            if not part.thought:
                texts.append(part.text or "")
        elif kind == "function_response":
            fr = part.function_response
            assert fr is not None  # _data_field said so
            if texts:
                out.append({"role": "user", "content": "\n".join(texts)})
                texts = []
            call_id = fr.id or (call_ids[answered] if answered < len(call_ids) else "")
            answered += 1
            out.append({"role": "tool", "tool_call_id": call_id, "content": response_text(fr.response)})
        elif kind == "function_call":
            if strict:
                raise _refuse(root, where, "a function_call belongs in a model turn, not a user turn")
            fc = part.function_call
            texts.append(json.dumps({"name": fc.name, "args": fc.args or {}}, ensure_ascii=False) if fc else "")
        else:
            texts.append(_placeholder(kind, part))
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _function_parts(content: Content, kind: str) -> int:
    return sum(1 for p in content.parts or [] if getattr(p, kind) is not None)


def check_turns(contents: list[Content]) -> None:
    """The Gemini API's turn rules for function calling (its own messages): a model turn with function
    calls follows a user turn; a turn of function responses follows the model turn of the calls and
    answers each of them."""
    prev: Content | None = None
    for c in contents:
        role = c.role or "user"
        if (
            role == "model"
            and _function_parts(c, "function_call")
            and (prev is None or (prev.role or "user") == "model")
        ):
            raise _conversation_error(
                "Please ensure that function call turn comes immediately after a user turn or after a "
                "function response turn."
            )
        responses = _function_parts(c, "function_response")
        if role != "model" and responses:
            calls = _function_parts(prev, "function_call") if prev is not None and prev.role == "model" else 0
            if not calls:
                raise _conversation_error(
                    "Please ensure that function response turn comes immediately after a function call turn."
                )
            if responses != calls:
                raise _conversation_error(
                    "Please ensure that the number of function response parts is equal to the number of "
                    "function call parts of the function call turn."
                )
        prev = c


def to_messages(
    req: GenerateContentRequest, *, strict: bool = True, root: str = "GenerateContentRequest"
) -> tuple[list[Message], list[dict[str, Any]] | None]:
    """A Gemini request -> normalised messages + tools (see the renderer's message shape). ``strict``:
    refuse what the real API refuses (docs/gateway-validation.md)."""
    if not req.contents:
        raise _refuse(root, "contents", "contents is not specified")
    for i, c in enumerate(req.contents):
        if c.role not in (None, "", "user", "model", "function"):
            raise GatewayError(400, "Please use a valid role: user, model.", param=f"contents[{i}].role")
        if not c.parts:
            raise _refuse(root, f"contents[{i}].parts", "contents.parts must not be empty.")
    if req.cached_content is not None:
        raise _refuse(root, "cached_content", "cached contents are not supported by this gateway")
    if strict:
        check_turns(req.contents)
    out: list[Message] = []
    system = _system_text(req.system_instruction, root)
    if system:
        out.append({"role": "system", "content": system})
    call_ids: list[str] = []  # ids of the calls of the previous model turn
    for i, c in enumerate(req.contents):
        if c.role == "model":
            msg = _model_message(c, i, root, strict)
            call_ids = [call["id"] for call in msg.get("tool_calls") or ()]
            out.append(msg)
        else:
            out.extend(_user_messages(c, i, root, strict, call_ids))
            call_ids = []
    return out, _tools(req, root, strict)


def _tools(req: GenerateContentRequest, root: str, strict: bool) -> list[dict[str, Any]] | None:
    cfg = req.tool_config.function_calling_config if req.tool_config else None
    if cfg is not None and cfg.mode is not None and cfg.mode not in CALLING_MODES:
        raise GatewayError(
            400,
            f"Invalid value at 'tool_config.function_calling_config.mode' "
            f"(type.googleapis.com/google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), {cfg.mode!r}",
            param="tool_config.function_calling_config.mode",
        )
    decls: list[dict[str, Any]] = []
    for i, tool in enumerate(req.tools or []):
        for j, fd in enumerate(tool.function_declarations or []):
            if strict and not FUNCTION_NAME.fullmatch(fd.name):
                raise _refuse(
                    root,
                    f"tools[{i}].function_declarations[{j}].name",
                    "Invalid function name. Must start with a letter or an underscore. Must be alphameric "
                    "(a-z, A-Z, 0-9), underscores (_), dots (.), colons (:) or dashes (-), with a maximum "
                    "length of 64.",
                )
            spec: dict[str, Any] = {"name": fd.name}
            if fd.description:
                spec["description"] = fd.description
            schema = fd.parameters_json_schema if fd.parameters_json_schema is not None else fd.parameters
            if schema is not None:
                spec["parameters"] = schema
            decls.append(spec)
    try:
        return normalize_tools(decls or None)
    except InvalidRequestError as exc:
        raise _refuse(root, "tools", str(exc)) from None


# --------------------------------------------------------------------------- the dialect


class Gemini(Dialect):
    """One Gemini method: ``generateContent`` (``stream=False``) or ``streamGenerateContent`` with
    ``alt=sse`` (``stream=True``); the app holds one of each (the wire body does not say which)."""

    name = DIALECT
    context_param = "contents"

    def __init__(self, renderer: Renderer, model_name: str, *, strict: bool = True, stream: bool = False) -> None:
        super().__init__(renderer, model_name, strict=strict)
        self.streams = stream

    # -- auth --------------------------------------------------------------------------------
    @staticmethod
    def api_key(request: Request) -> str | None:
        """The key a Gemini client sends: ``x-goog-api-key``, the ``key`` query parameter, a Bearer token."""
        key = request.headers.get("x-goog-api-key") or request.query_params.get("key")
        if key and key.strip():
            return key.strip()
        scheme, _, value = (request.headers.get("authorization") or "").strip().partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None

    def credentials(self, request: Request) -> Mapping[str, str]:
        headers = dict(request.headers)
        key = self.api_key(request)
        if key is not None:
            headers.pop("authorization", None)
            headers["x-api-key"] = key
        return headers

    def unauthorized(self) -> GatewayError:
        return GatewayError(
            401,
            "API key not valid. Please pass a valid API key. (unknown or closed LEGO-RL session token)",
            code="invalid_api_key",
        )

    def missing_key(self) -> GatewayError:
        return GatewayError(403, NO_KEY, code="missing_api_key")

    # -- errors ------------------------------------------------------------------------------
    def error_body(self, err: GatewayError) -> dict[str, Any]:
        status = self.error_status(err)
        message = err.message
        if err.code == INVALID_JSON:
            message = f"Invalid JSON payload received. {message}"
        elif err.code == "context_length_exceeded":
            nums = re.findall(r"\d+", message)
            if len(nums) >= 2 and "maximum context length" in message:
                message = f"The input token count ({nums[1]}) exceeds the maximum number of tokens allowed ({nums[0]})."
        body: dict[str, Any] = {
            "code": status,
            "message": message,
            "status": STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION"),
        }
        details: list[dict[str, Any]] = []
        if err.param and status == 400:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": err.param, "description": message}],
                }
            )
        if err.code in ("invalid_api_key", "missing_api_key"):
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID" if err.code == "invalid_api_key" else "CONSUMER_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            )
        if status == 429:
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"})
        if details:
            body["details"] = details
        return {"error": body}

    # -- requests ----------------------------------------------------------------------------
    def parse(self, body: dict[str, Any], session_id: str) -> CoreCall:
        root = "GenerateContentRequest"
        try:
            req = GenerateContentRequest.model_validate(body)
        except ValidationError as exc:
            raise _validation_error(exc, root) from None
        messages, tools = to_messages(req, strict=self.strict, root=root)
        cfg = req.generation_config or GenerationConfig()
        if cfg.candidate_count not in (None, 1):
            raise _refuse(
                root,
                "generation_config.candidate_count",
                f"only 1 candidate is supported by this gateway, got {cfg.candidate_count}",
            )
        return CoreCall(
            messages=messages,
            tools=tools,
            max_tokens=cfg.max_output_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=cfg.seed,
            stop=[s for s in cfg.stop_sequences or [] if s],
            stream=self.streams,
            extra={"logprobs": bool(cfg.response_logprobs)},
        )

    def count_tokens(self, body: dict[str, Any]) -> dict[str, Any]:
        """``:countTokens``: the prompt tokens the request would cost (``contents``, or a whole
        ``generateContentRequest`` with its system instruction and tools)."""
        root = "CountTokensRequest"
        try:
            req = CountTokensRequest.model_validate(body)
        except ValidationError as exc:
            raise _validation_error(exc, root) from None
        if req.generate_content_request is not None and req.contents:
            raise _refuse(root, "contents", "contents and generate_content_request cannot both be set")
        gen = req.generate_content_request or GenerateContentRequest(contents=req.contents)
        messages, tools = to_messages(gen, strict=self.strict, root=root)
        try:
            n = len(self.renderer.render_prompt(messages, tools))
        except InvalidRequestError as exc:
            raise _refuse(root, "contents", str(exc)) from None
        return {"totalTokens": n, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n}]}

    # -- responses ---------------------------------------------------------------------------
    def make_response(self, call: CoreCall, completion: Completion) -> dict[str, Any]:
        parsed = completion.parsed
        parts: list[dict[str, Any]] = []
        if parsed.content or not parsed.tool_calls:
            parts.append({"text": parsed.content})
        for c in parsed.tool_calls:
            parts.append({"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}})
        candidate: dict[str, Any] = {
            "content": {"role": "model", "parts": parts},
            "finishReason": "MAX_TOKENS" if completion.finish_reason == "length" else "STOP",
            "index": 0,
        }
        lps = completion.output_logprobs
        if lps:
            candidate["avgLogprobs"] = sum(lps) / len(lps)
        if call.extra.get("logprobs"):
            dec = self.renderer.decode
            candidate["logprobsResult"] = {
                "chosenCandidates": [
                    {"token": dec([t]), "tokenId": t, "logProbability": lp}
                    for t, lp in zip(completion.output_token_ids, lps)
                ],
                "logProbabilitySum": sum(lps),
            }
        n_out = len(completion.output_token_ids)
        usage: dict[str, Any] = {
            "promptTokenCount": completion.prompt_tokens,
            "candidatesTokenCount": n_out,
            "totalTokenCount": completion.prompt_tokens + n_out,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": completion.prompt_tokens}],
        }
        cached = min(completion.cached_prompt_tokens, completion.prompt_tokens)
        if cached:
            usage["cachedContentTokenCount"] = cached
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": self.model_name,
            "responseId": response_id(call),
            "x_legorl": legorl_info(completion),
        }

    def stream_writer(self, call: CoreCall, start: StreamStart) -> StreamWriter:
        return _GeminiStream(self, call, start)


class _GeminiStream(StreamWriter):
    """Response chunks as ``data:`` lines (nothing before the first text); the last one carries the
    function calls, ``finishReason`` and the full ``usageMetadata``; an error is a ``data:`` line with
    the error body."""

    def __init__(self, dialect: Gemini, call: CoreCall, start: StreamStart) -> None:
        super().__init__(dialect, call, start)
        self.dialect = dialect

    def _chunk(self, candidate: dict[str, Any], usage: dict[str, Any]) -> bytes:
        return sse(
            {
                "candidates": [candidate],
                "usageMetadata": usage,
                "modelVersion": self.model_name,
                "responseId": response_id(self.call),
            }
        )

    def _text_chunk(self, text: str) -> bytes:
        prompt = self.start.prompt_tokens
        candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
        return self._chunk(candidate, {"promptTokenCount": prompt, "totalTokenCount": prompt})

    def head(self) -> list[bytes]:
        return []

    def _text_events(self, delta: str) -> list[bytes]:
        return [self._text_chunk(delta)]

    def _finish_events(self, resp: dict[str, Any], rest: str) -> list[bytes]:
        candidate = resp["candidates"][0]
        calls = [p for p in candidate["content"]["parts"] if "functionCall" in p]
        pieces = text_pieces(self.renderer, rest)
        last: list[dict[str, Any]] = calls or [{"text": pieces.pop() if pieces else ""}]
        out = [self._text_chunk(p) for p in pieces]
        out.append(self._chunk({**candidate, "content": {"role": "model", "parts": last}}, resp["usageMetadata"]))
        return out

    def error(self, err: GatewayError) -> list[bytes]:
        return [sse(self.dialect.error_body(err))]


def response_id(call: CoreCall) -> str:
    return str(call.reserve("id", lambda: uuid.uuid4().hex[:22]))


def model_resource(model_name: str, max_context: int) -> dict[str, Any]:
    """The served model as Google's ``models.get`` describes it."""
    return {
        "name": f"models/{model_name}",
        "baseModelId": model_name,
        "version": "legorl",
        "displayName": model_name,
        "description": "served by the LEGO-RL gateway",
        "inputTokenLimit": max_context,
        "outputTokenLimit": max_context,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    }
