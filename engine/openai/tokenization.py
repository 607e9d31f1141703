"""vLLM's `/tokenize` and `/detokenize`, read and answered: a prompt or a chat's messages as
the ids the model is given, and ids back to text. A chat is read and rendered by the very
code /v1/chat/completions uses, so its count is that request's `usage.prompt_tokens`: a
client can measure a prompt against `max_model_len` before sending it. What cannot be
honoured here is a 400 naming the field, as on /v1."""

from __future__ import annotations

from typing import Any

from .errors import bad_request
from .request import read_request, served_model

CHAT_FIELDS = ("model", "messages", "tools", "tool_choice")  # what the rendering reads
# vLLM's options that would render a chat otherwise than /v1/chat/completions does
REFUSED = {"add_generation_prompt": False, "continue_final_message": True,
           "add_special_tokens": True}  # fmt: skip


def tokenize(eng: Any, body: Any, models: list[str]) -> dict:
    """`{"tokens", "count", "max_model_len"}` for a body with `prompt` or `messages`."""
    served_model(body, models)
    if ("prompt" in body) == ("messages" in body):
        raise bad_request("give either prompt (a string) or messages (a chat)", "prompt")
    dec = eng.ensure_model()
    ids = _prompt_ids(dec, body) if "prompt" in body else _chat_ids(dec, body, models)
    return {"tokens": ids, "count": len(ids), "max_model_len": dec.lm.max_model_len}


def detokenize(eng: Any, body: Any, models: list[str]) -> dict:
    """`{"prompt": text}` for a body's `tokens`, decoded as the tokenizer decodes them."""
    served_model(body, models)
    tok = eng.ensure_model().lm.tokenizer
    ids, n = body.get("tokens"), len(tok)
    if not isinstance(ids, list) or not all(_is_id(t, n) for t in ids):
        raise bad_request(f"tokens must be a list of token ids (0 to {n - 1})", "tokens")
    return {"prompt": tok.decode(ids)}


def _prompt_ids(dec: Any, body: dict) -> list[int]:
    """The prompt as it is, as /v1/completions gives it; without the tokenizer's special
    tokens (a BOS) where `add_special_tokens` is false."""
    prompt, special = body["prompt"], body.get("add_special_tokens", True)
    if not isinstance(prompt, str):
        raise bad_request("prompt must be one string", "prompt")
    if not isinstance(special, bool):
        raise bad_request("add_special_tokens must be true or false", "add_special_tokens")
    if special:
        return dec.prompt_ids(prompt, True)
    return list(dec.lm.tokenizer.encode(prompt, add_special_tokens=False))


def _chat_ids(dec: Any, body: dict, models: list[str]) -> list[int]:
    """The messages (and tools) through the model's chat template, a generation prompt
    after them: the ids a chat completion of the same messages starts from."""
    for name, value in REFUSED.items():
        if body.get(name, not value) == value:
            raise bad_request(f"{name}: {str(value).lower()} is not supported here: a chat "
                              "is tokenized as /v1/chat/completions renders it", name)  # fmt: skip
    if body.get("chat_template") or body.get("chat_template_kwargs"):
        raise bad_request("only the model's own chat template is used here", "chat_template")
    g = read_request({k: body[k] for k in CHAT_FIELDS if k in body}, "chat", models).gen
    return dec.prompt_ids(g.prompt, g.raw_prompt, g.messages, g.tools)


def _is_id(t: Any, n: int) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n
