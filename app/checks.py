"""What the page checks as the user types (regex, schema, grammar, tools) and the Test
strings panel; every error as one visible line."""

from __future__ import annotations

import html
import re

from engine.analysis.check import check_text
from engine.backends import AUTO, DEFAULT_BACKEND, GRAMMAR_SYNTAX, check_grammar
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.limits import LIVE_CHECK_S
from engine.regex.dfa import validate_regex
from engine.schema import parse_schema, schema_to_regex
from engine.triggers.tools import parse_tools
from viz.highlight import test_strings_html

from .inputs import PageInputs
from .state import EngineHub, check_page_model

# the engine's messages name CLI flags; on the page the same switch is a control (a
# flag followed by "to the CLI" is about the CLI and stays)
PAGE_CONTROLS = (
    (r"use --runtime (\w+)", r"set the Runtime menu to \1"),
    (r"--runtime (\w+)", r"the Runtime menu set to \1"),
    (r"--lenient", "the Lenient box"),
    (r"--spec", "the Spec reading box"),
)
# flags the engine names in messages the page never shows, and why it never does
CLI_ONLY = {
    "--raw-prompt": "the page always applies the chat template, so its prompt is never empty",
}


def for_the_page(message: str) -> str:
    """An engine message with its CLI flags named as the page's controls."""
    for flag, control in PAGE_CONTROLS:
        message = re.sub(flag + r"(?![\w-])(?! to the CLI)", control, message)
    return message


def error_line(exc: BaseException) -> str:
    """An error as the page's one visible line (never a traceback)."""
    if isinstance(exc, CfsmError):
        return (
            f'<div class="cfsm-error" id="error-box">\u26a0 {html.escape(exc.kind)}: '
            f"{html.escape(for_the_page(exc.message))}</div>"
        )
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return (
        f'<div class="cfsm-error" id="error-box">\u26a0 internal error: {html.escape(text)}</div>'
    )


def _regex_automaton_check(text: str, ws: str, hub: EngineHub | None) -> str:
    """'' when the regex's automaton was built within the live check's budget (or could
    not be tried now); a line saying it is slow otherwise. A state explosion raises."""
    eng = hub.peek() if hub is not None else None
    if eng is None:
        return ""
    got = eng.try_automaton(Constraint.from_inputs("regex", text, ws))
    if got.dfa is not None:
        return f": {got.dfa.num_states:,} automaton states"
    if got.why_not == "slow":
        return (
            f"; its automaton takes longer than {LIVE_CHECK_S:g} s to build (Run allows "
            f"{eng.cache.timeout_s:g} s)"
        )
    return ""


def live_check(
    kind: str, text: str, ws: str, backend: str = DEFAULT_BACKEND, hub: EngineHub | None = None
) -> str:
    """Validation while typing, in the engine's words: no compile against the vocabulary;
    a regex's automaton is built by the live check's own worker within LIVE_CHECK_S (so
    a state explosion shows before Run)."""
    if not (text or "").strip():
        return ""
    more = ""
    try:
        if kind == "grammar" and backend == AUTO:
            return _grammar_for_auto(text)
        if kind == "grammar":
            takes = backend in GRAMMAR_SYNTAX
            parser = backend if takes else next(iter(GRAMMAR_SYNTAX))
            check_grammar(text, parser)
            if not takes:
                choices = " or ".join(f"{n} ({s})" for n, s in GRAMMAR_SYNTAX.items())
                return (
                    f'<div class="cfsm-muted">valid {GRAMMAR_SYNTAX[parser]}; the '
                    f"{html.escape(backend)} backend "
                    f"takes no grammars \u2014 choose {choices}</div>"
                )
        elif kind == "regex":
            validate_regex(text)
            more = _regex_automaton_check(text, ws, hub)
        elif kind == "schema":
            parse_schema(text)
            try:
                schema_to_regex(text, ws)
            except CfsmError as exc:
                return (
                    '<div class="cfsm-muted">valid schema; the FSM view is unavailable '
                    f"({exc.message}) \u2014 tick Lenient, or use xgrammar or llguidance</div>"
                )
        ok = f"\u2713 looks valid{html.escape(more)}"
        return f'<div class="cfsm-muted" style="color:#15803d">{ok}</div>'
    except CfsmError as exc:
        return error_line(exc)


def _grammar_for_auto(text: str) -> str:
    """A grammar under `auto`: valid when one grammar backend parses it (auto runs it on
    that one); else each one's reason."""
    why = []
    for name, syntax in GRAMMAR_SYNTAX.items():
        try:
            check_grammar(text, name)
        except CfsmError as exc:
            why.append(f"{syntax} ({name}): {exc.message}")
            continue
        ok = f"\u2713 valid {syntax}: auto runs it on {name}"
        return f'<div class="cfsm-muted" style="color:#15803d">{html.escape(ok)}</div>'
    return error_line(CfsmError("invalid_grammar", "; ".join(why)))


def tools_check(text: str) -> str:
    """The Tools box checked while typing: the tools it names, or what is wrong."""
    if not (text or "").strip():
        return ""
    try:
        tools = parse_tools(text)
    except CfsmError as exc:
        return error_line(exc)
    names = html.escape(", ".join(t.name for t in tools))
    n = f"{len(tools)} tool{'s' if len(tools) != 1 else ''}"
    return f'<div class="cfsm-muted" id="tools-ok">\u2713 {n}: {names}</div>'


def strings_checker(ui, hub: EngineHub):
    """The Test strings panel's handler: each line checked with the chosen backend."""

    def do_test_strings(values: dict):
        try:
            inp = PageInputs.read(ui, values)
            c = inp.constraint()
            eng = hub.get(check_page_model(inp.model))
            res = eng.compile(c, inp.backend)
            texts = [t for t in (values[ui.ts_text] or "").split("\n") if t != ""][:50]
            return test_strings_html(
                [{"text": t, **check_text(res.compiled, res.dfa, eng.ctx, t, c)} for t in texts]
            )
        except BaseException as exc:  # noqa: BLE001 - one line, the app keeps serving
            return error_line(exc)

    return do_test_strings
