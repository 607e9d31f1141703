"""An OpenAI chat or completion request read as the engine's `GenerateRequest`: the
constraint from `response_format` or vLLM's `structured_outputs` (older `guided_*` names
too), tools, sampling and limits; what the engine cannot honour is a 400 naming the field.
Extension fields (top level, as vLLM takes them): mode, backend, whitespace, lenient,
spec, runtime, reasoning, think_budget, trigger_impl, trace. SGLang's `regex` / `ebnf` and
llama-server's `grammar` / `json_schema` are read as constraints too."""

from __future__ import annotations

import difflib
import json
import re
import secrets
from dataclasses import dataclass, field

from ..constraint import Constraint
from ..decoding.request import EXTENSION, GenerateRequest, offered_on
from ..errors import CfsmError
from ..triggers.plan import DEFAULT_TOOL_START
from .errors import ApiError, bad_request, from_engine

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP = 4
MAX_TOP_LOGPROBS = 20
DEFAULT_MAX_TOKENS = 256  # the engine's default; a request may ask up to CFSM_MAX_NEW_TOKENS
# the engine's own request fields a body may carry (declared with the request)
EXTENSIONS = tuple(k for k, v in offered_on("v1").items() if v == EXTENSION)
CONSTRAINT_EXTENSIONS = ("whitespace", "lenient", "spec")
# fields a client may send that change nothing here (said in the response's `cfsm`)
HARMLESS = {
    "user", "metadata", "store", "service_tier", "parallel_tool_calls", "stream_options",
    "modalities", "prompt_cache_key", "safety_identifier", "verbosity", "reasoning_effort",
    "model", "messages", "prompt", "stream", "n", "trace",
}  # fmt: skip
# top-level constraint fields other servers take: vLLM's older guided_*, SGLang's regex and
# ebnf, llama-server's grammar and json_schema
GUIDED = {
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
    "guided_json": "json",
    "regex": "regex",
    "ebnf": "grammar",
    "grammar": "grammar",
    "json_schema": "json",
}


@dataclass
class ApiRequest:
    """What the route needs besides the engine's request: how to answer."""

    gen: GenerateRequest
    model: str
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    stop: list[str] = field(default_factory=list)
    tools: bool = False  # calls are answered as tool_calls
    tool_start: str = DEFAULT_TOOL_START
    reasoning: bool = False
    ignored: list[str] = field(default_factory=list)
    constraint_field: str | None = None  # the field a compile error points at


def read_request(body, endpoint: str, models: list[str]) -> ApiRequest:
    """`endpoint` is "chat" or "completions"; `models` the ids /v1/models lists."""
    model = served_model(body, models)
    _refuse_unsupported(body, endpoint)
    prompt, messages = _prompt(body, endpoint)
    constraint, from_field = _constraint(body)
    tools, choice = _tools(body, constraint)
    top = _top_logprobs(body, endpoint)
    inputs = {k: body.get(k) for k in EXTENSIONS if body.get(k) is not None}
    inputs.update(guided_backend(body))
    mode_given = "mode" in inputs
    if constraint is None and not tools:
        inputs.pop("mode", None)  # nothing to constrain: a free run, whatever the mode says
    try:
        gen = GenerateRequest.from_inputs(
            prompt,
            constraint,
            messages=messages,
            raw_prompt=endpoint == "completions",
            tools=tools,
            tool_choice=choice,
            max_new_tokens=_max_tokens(body),
            temperature=_number(body, "temperature", 1.0),
            top_p=_number(body, "top_p", 1.0),
            seed=_seed(body),
            top_k=max(10, top),
            trace_detail=body.get("trace", True) is not False,
            **inputs,
        )
    except CfsmError as exc:
        param = _param_of(exc.message, from_field, mode_given)
        raise from_engine(_on_v1(exc), param) from None
    opts = body.get("stream_options") or {}
    known = HARMLESS | set(EXTENSIONS) | set(CONSTRAINT_EXTENSIONS) | set(GUIDED) | _USED
    known |= GUIDED_OPTIONS
    so = body.get("structured_outputs") or {}
    same_here = [f"structured_outputs.{k}" for k in SO_SAME_HERE if k in so]
    return ApiRequest(
        gen=gen,
        model=model,
        stream=body.get("stream") is True,
        include_usage=isinstance(opts, dict) and opts.get("include_usage") is True,
        logprobs=body.get("logprobs") is not None and body.get("logprobs") is not False,
        top_logprobs=top,
        stop=_stop(body),
        tools=bool(tools),
        tool_start=gen.tool_start,
        reasoning=gen.reasoning,
        ignored=sorted([k for k in body if k not in known] + same_here),
        constraint_field=from_field or ("tools" if tools else None),
    )


def served_model(body, models: list[str]) -> str:
    """The body's `model`, one of `models` (a 404 otherwise), as every route reads it."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if model is None:  # as vLLM: the served model
        return models[0]
    if model not in models:
        raise ApiError(
            404,
            f"model {model!r} is not served here; /v1/models lists {', '.join(models)}",
            param="model",
            code="model_not_found",
        )
    return model


_USED = {
    "response_format", "structured_outputs", "tools", "tool_choice", "logprobs",
    "top_logprobs", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
    "stop", "frequency_penalty", "presence_penalty", "logit_bias", "echo", "best_of",
    "suffix",
}  # fmt: skip


def _on_v1(exc: CfsmError) -> CfsmError:
    """The engine's refusal with its fields named as a /v1 body names them
    (`max_new_tokens` -> `max_tokens`)."""
    msg = exc.message
    for name, v1 in offered_on("v1").items():
        if v1 not in (EXTENSION, name):
            msg = re.sub(rf"\b{name}\b", v1, msg)
    return CfsmError(exc.error_kind, msg)


def _param_of(message: str, constraint_field: str | None, mode_given: bool) -> str | None:
    """The request field an engine refusal is about, as far as its message says."""
    words = {"max_new_tokens": "max_tokens", "temperature": "temperature", "tool": "tools",
             "prompt": "messages", "runtime": "runtime"}  # fmt: skip
    for word, param in words.items():
        if word in message:
            return param
    return "mode" if mode_given and "mode" in message else constraint_field


def _refuse_unsupported(body: dict, endpoint: str) -> None:
    if body.get("n") not in (None, 1):
        raise bad_request("n must be 1: each request decodes one output here", "n")
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name):
            raise bad_request(f"{name} is not supported (leave it 0)", name)
    if body.get("logit_bias"):
        raise bad_request("logit_bias is not supported", "logit_bias")
    if endpoint == "completions":
        if body.get("echo"):
            raise bad_request("echo is not supported", "echo")
        if body.get("best_of", 1) not in (1, None):
            raise bad_request("best_of must be 1", "best_of")
        if body.get("suffix"):
            raise bad_request("suffix is not supported", "suffix")


def _prompt(body: dict, endpoint: str) -> tuple[str, str]:
    """(the prompt the page shows, the chat's messages as JSON text or "")."""
    if endpoint == "completions":
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]
        if not isinstance(p, str):
            raise bad_request("prompt must be one string (token ids and batches are not "
                              "supported)", "prompt")  # fmt: skip
        return p, ""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad_request("messages must be a non-empty list", "messages")
    out = [_message(i, m) for i, m in enumerate(msgs)]
    users = [m["content"] for m in out if m["role"] == "user" and m["content"]]
    return (users[-1] if users else out[-1]["content"] or ""), json.dumps(out)


def _message(i: int, m) -> dict:
    where = f"messages[{i}]"
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise bad_request(f"{where} must be an object with a role of {', '.join(ROLES)}", where)
    out = {"role": "system" if m["role"] == "developer" else m["role"]}
    out["content"] = _content(m.get("content"), where)
    for k in ("name", "tool_call_id"):
        if isinstance(m.get(k), str):
            out[k] = m[k]
    calls = m.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls
        ):
            raise bad_request(f'{where}.tool_calls must be a list of {{"function": {{"name", '
                              '"arguments"}}}} objects', where)  # fmt: skip
        if calls:
            out["tool_calls"] = [_call_for_template(c) for c in calls]
    return out


def _content(c, where: str) -> str:
    if c is None or isinstance(c, str):
        return c or ""
    if isinstance(c, list):
        parts = []
        for p in c:
            if not isinstance(p, dict) or p.get("type") != "text":
                raise bad_request(f"{where}: only text content parts are supported", where)
            parts.append(str(p.get("text", "")))
        return "".join(parts)
    raise bad_request(f"{where}.content must be a string or a list of text parts", where)


def _call_for_template(c) -> dict:
    """A past call as chat templates read it (arguments as an object, not JSON text)."""
    fn = c["function"]
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return {"type": "function", "id": c.get("id"), "function": {"name": fn.get("name"),
            "arguments": args}}  # fmt: skip


# the keys each constraint object takes (an unknown one is a 400 naming it: a typo such as
# `{"regx": ...}` would otherwise decode unconstrained). vLLM's StructuredOutputsParams
# fields; OpenAI's response_format and json_schema; llama-server's `schema` beside a
# json_object or json_schema type
SO_CONSTRAINTS = ("regex", "choice", "grammar", "json", "json_object")
SO_KEYS = {
    *SO_CONSTRAINTS, "disable_any_whitespace", "disable_fallback",
    "disable_additional_properties", "whitespace_pattern", "structural_tag",
}  # fmt: skip
# vLLM options that change nothing here: compact JSON and no additional properties
# beyond the schema's own are this server's defaults, and there is no fallback backend
SO_SAME_HERE = ("disable_fallback", "disable_additional_properties", "disable_any_whitespace")
RF_KEYS = {"type", "json_schema", "schema"}
JSON_SCHEMA_KEYS = {"name", "schema", "strict", "description"}
GUIDED_OPTIONS = {"guided_decoding_backend", "guided_whitespace_pattern", "guided_json_object"}
# vLLM's guided_decoding_backend names, as this server's backends
GUIDED_BACKENDS = {"xgrammar": "xgrammar", "guidance": "llguidance", "outlines": "outlines",
                   "auto": "auto", "lm-format-enforcer": None}  # fmt: skip


def _strict_keys(obj: dict, known: set, where: str, top: bool = False) -> None:
    """A 400 naming the first key of `obj` not in `known` (with the nearest known one);
    `top`: the keys are the body's own fields (the param is the key alone)."""
    for k in obj:
        if k not in known:
            near = difflib.get_close_matches(str(k), sorted(known), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise bad_request(f"{where} has no field {k!r}{hint}; it takes "
                              f"{', '.join(sorted(known))}",
                              k if top else f"{where}.{k}")  # fmt: skip


def _response_format(rf) -> tuple[str, object] | None:
    """(kind, value) of a response_format, or None for text."""
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise bad_request("response_format.type must be text, json_object or json_schema",
                          "response_format")  # fmt: skip
    _strict_keys(rf, RF_KEYS, "response_format")
    if isinstance(rf.get("schema"), dict):  # llama-server's form, beside either type
        return "json", rf["schema"]
    if rf["type"] == "json_object":
        return "json", {"type": "object"}
    if rf["type"] == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or not isinstance(js.get("schema"), dict):
            raise bad_request("response_format.json_schema.schema must be an object",
                              "response_format")  # fmt: skip
        _strict_keys(js, JSON_SCHEMA_KEYS, "response_format.json_schema")
        return "json", js["schema"]
    return None


def _structured_outputs(so) -> list[tuple[str, object]]:
    if not isinstance(so, dict):
        raise bad_request("structured_outputs must be an object", "structured_outputs")
    _strict_keys(so, SO_KEYS, "structured_outputs")
    for k in ("structural_tag", "whitespace_pattern"):
        if so.get(k) is not None:
            raise bad_request(f"structured_outputs.{k} is not supported here (tools with "
                              "tool_choice cover structural tags; the whitespace field sets "
                              "JSON whitespace)", f"structured_outputs.{k}")  # fmt: skip
    found = [(k, so[k]) for k in SO_CONSTRAINTS[:4] if so.get(k) is not None]
    if so.get("json_object"):
        found.append(("json", {"type": "object"}))
    return found


def _guided(body: dict) -> list[tuple[str, str, object]]:
    """The top-level constraint fields; an unknown `guided_*` name is a typo's 400."""
    for k in body:
        if isinstance(k, str) and k.startswith("guided_") and k not in GUIDED:
            _strict_keys({k: None}, set(GUIDED) | GUIDED_OPTIONS, "the request", top=True)
    if body.get("guided_whitespace_pattern") is not None:
        raise bad_request("guided_whitespace_pattern is not supported here (the whitespace "
                          "field sets JSON whitespace)", "guided_whitespace_pattern")  # fmt: skip
    found = [(name, k, body[name]) for name, k in GUIDED.items() if body.get(name) is not None]
    if body.get("guided_json_object"):
        found.append(("guided_json_object", "json", {"type": "object"}))
    return found


def guided_backend(body: dict) -> dict:
    """vLLM's `guided_decoding_backend` as this server's `backend` field (where the body
    gives no `backend` of its own)."""
    name = body.get("guided_decoding_backend")
    if name is None or body.get("backend") is not None:
        return {}
    ours = GUIDED_BACKENDS.get(str(name).split(":")[0])
    if ours is None:
        raise bad_request(f"guided_decoding_backend {name!r} is not served here; it takes "
                          "xgrammar, guidance, outlines or auto",
                          "guided_decoding_backend")  # fmt: skip
    return {"backend": ours}


def _constraint(body: dict) -> tuple[Constraint | None, str | None]:
    """The one constraint a request names, and the field it came from."""
    found: list[tuple[str, str, object]] = []  # (field, kind, value)
    if body.get("response_format") is not None:
        got = _response_format(body["response_format"])
        if got is not None:
            found.append(("response_format", *got))
    if body.get("structured_outputs") is not None:
        found += [("structured_outputs", k, v) for k, v in
                  _structured_outputs(body["structured_outputs"])]  # fmt: skip
    found += _guided(body)
    if len(found) > 1:
        names = ", ".join(f"{f}.{k}" if f == "structured_outputs" else f for f, k, _ in found)
        raise bad_request(f"give one constraint, not several ({names})", found[1][0])
    if not found:
        return None, None
    where, kind, value = found[0]
    ws = body.get("whitespace") or "compact"
    try:
        return _as_constraint(kind, value, ws, body), where
    except CfsmError as exc:
        raise from_engine(exc, where) from None


def _as_constraint(kind: str, value, ws: str, body: dict) -> Constraint:
    lenient, spec = bool(body.get("lenient")), bool(body.get("spec"))
    if kind == "json":
        if isinstance(value, dict) and isinstance(value.get("schema"), dict) and "name" in value:
            value = value["schema"]  # OpenAI's json_schema wrapper given at the top level
        text = value if isinstance(value, str) else json.dumps(value)
        return Constraint.from_inputs("schema", text, ws, lenient, spec)
    if kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise CfsmError("invalid_input", "choice must be a non-empty list of strings")
        return Constraint.from_inputs("regex", "(" + "|".join(map(regex_literal, value)) + ")")
    if not isinstance(value, str):
        raise CfsmError("invalid_input", f"the {kind} must be text")
    return Constraint.from_inputs(kind, value, ws)


def regex_literal(text: str) -> str:
    """`text` as a regex matching exactly it (metacharacters escaped, nothing else)."""
    return "".join("\\" + c if c in "\\.^$|?*+()[]{}/" else c for c in text)


def _tools(body: dict, constraint) -> tuple[str, str]:
    """(tools as JSON text, the engine's tool_choice); ("", "auto") when no call may come."""
    tools, choice = body.get("tools"), body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return "", "auto"
    if constraint is not None:
        raise bad_request("tools together with a response format or structured output are "
                          "not supported: give one of them", "tools")  # fmt: skip
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise bad_request('tool_choice must be auto, required, none or {"type": '
                              '"function", "function": {"name": ...}}', "tool_choice")  # fmt: skip
        choice = name
    if choice not in ("auto", "required") and not isinstance(choice, str):
        raise bad_request("tool_choice must be auto, required, none or a function", "tool_choice")
    return json.dumps(tools), choice


def _top_logprobs(body: dict, endpoint: str) -> int:
    if endpoint == "completions":
        lp = body.get("logprobs")
        if lp is None or lp is False:
            return 0
        if not isinstance(lp, int) or not 0 <= lp <= 5:
            raise bad_request("logprobs must be an integer from 0 to 5", "logprobs")
        return int(lp)
    top = body.get("top_logprobs")
    if top is None:
        return 0
    if not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise bad_request(f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}",
                          "top_logprobs")  # fmt: skip
    if not body.get("logprobs"):
        raise bad_request("top_logprobs needs logprobs set to true", "top_logprobs")
    return top


def _max_tokens(body: dict) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise bad_request(f"{name} must be a positive integer", name)
            return v
    return DEFAULT_MAX_TOKENS


def _number(body: dict, name: str, default: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise bad_request(f"{name} must be a number", name)
    return float(v)


def _seed(body: dict) -> int:
    """The request's seed (a random one where it gives none, as OpenAI's sampling is)."""
    v = body.get("seed")
    if v is None:
        return secrets.randbelow(2**31)
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**63:
        raise bad_request("seed must be an integer from 0 to 2**63 - 1", "seed")
    return v


def _stop(body: dict) -> list[str]:
    s = body.get("stop")
    if s is None:
        return []
    stops = [s] if isinstance(s, str) else s
    if not isinstance(stops, list) or not all(isinstance(x, str) and x for x in stops):
        raise bad_request("stop must be a string or a list of non-empty strings", "stop")
    if len(stops) > MAX_STOP:
        raise bad_request(f"stop takes at most {MAX_STOP} strings", "stop")
    return stops
