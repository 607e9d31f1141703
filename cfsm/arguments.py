"""The command line's shared flags: the constraint (regex, schema, grammar and how to read
it), the model and runtime, the request's flags (built from its declaration); each added
by one function that the commands taking it call, so a flag is spelled once."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.decoding.request import offered_on, offers
from engine.errors import CfsmError
from engine.limits import MAX_SCHEMA_CHARS
from engine.schema import WHITESPACE_POLICIES

SPEC_HELP = (
    "read the schema as JSON Schema does: objects accept keys they do not list unless "
    "additionalProperties closes them, and an integer may be written 1.0 (default: generation's "
    "reading, closed objects and one spelling per number)"
)


def load_schema_arg(arg: str) -> str:
    """`--schema` takes a path or inline JSON (a path is the CLI's business, not the
    engine's)."""
    s = arg.strip()
    if s.startswith("{") or s in ("true", "false"):
        return s
    p = Path(arg)
    if p.exists():
        if p.stat().st_size > MAX_SCHEMA_CHARS:
            raise CfsmError(
                "input_too_large", f"schema file {arg} is larger than {MAX_SCHEMA_CHARS} bytes"
            )
        return p.read_text(encoding="utf-8")
    raise CfsmError(
        "invalid_schema", f"--schema {arg!r} is neither inline JSON nor an existing file"
    )


def add_constraint_args(p: argparse.ArgumentParser, grammar: bool = False) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--regex", help="regular expression (Python syntax, full match)")
    g.add_argument("--schema", help="JSON schema: a file path or inline JSON")
    if grammar:
        g.add_argument(
            "--grammar",
            help="EBNF (xgrammar) or Lark (llguidance) grammar: a file path or inline text",
        )
    p.add_argument(
        "--whitespace",
        default="compact",
        choices=WHITESPACE_POLICIES,
        help="whitespace policy for JSON schemas (same for every backend)",
    )
    p.add_argument(
        "--lenient",
        action="store_true",
        help=(
            "compile schema keywords the backend cannot enforce, with a warning, instead of "
            "refusing"
        ),
    )
    p.add_argument("--spec", action="store_true", help=SPEC_HELP)


def add_optional_constraint_args(p: argparse.ArgumentParser) -> None:
    """The constraint flags where a --requests file may give the constraint instead."""
    p.add_argument("--regex")
    p.add_argument("--schema")
    p.add_argument("--grammar")
    p.add_argument("--whitespace", default="compact", choices=WHITESPACE_POLICIES)
    p.add_argument(
        "--lenient",
        action="store_true",
        help="compile unenforceable schema keywords with a warning",
    )
    p.add_argument("--spec", action="store_true", help=SPEC_HELP)


def add_request_args(p: argparse.ArgumentParser) -> None:
    """The request's flags, built from its declaration (`GenerateRequest`'s Offers): one
    flag per field the CLI offers, typed by the field's default, with its help and
    choices. Each defaults to None, so that the request's own default (and the mode's
    rule: jump under a constraint, else free) applies where a flag is not given."""
    flags = offered_on("cli")
    for f, offer in offers():
        if f.name not in flags:
            continue
        flag, default = flags[f.name], f.default
        shown = "" if f.name == "mode" or isinstance(default, bool) else f" (default: {default!r})"
        kw: dict = {"default": None, "help": offer.help + shown}
        if isinstance(default, bool):
            kw["action"] = "store_const"
            kw["const"] = True
        else:
            kw["type"] = type(default)
            if offer.choices:
                kw["choices"] = offer.choices
        p.add_argument(flag, **kw)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default=None,
        help=(
            "HF model id (from the local cache) or local path; default: embedded "
            "SmolLM2-135M-Instruct"
        ),
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: CUDA when present)")
    add_runtime_arg(p)
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow model code from the model folder (off by default)",
    )


def add_runtime_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--runtime",
        default=None,
        choices=("auto", "transformers", "llamacpp"),
        help=(
            "what runs the model: llamacpp (a GGUF file on the CPU) or transformers (PyTorch); "
            "default auto: llama.cpp for a GGUF model on the CPU, transformers otherwise"
        ),
    )
