"""What the page checks as the user types (regex, schema, grammar, tools) and the Test
strings panel; every error as one visible line."""

from __future__ import annotations

import concurrent.futures as cf
import html
import re

from engine.analysis.check import check_text
from engine.backends import AUTO, DEFAULT_BACKEND, GRAMMAR_SYNTAX, check_grammar, get_backend
from engine.backends.audit import audit
from engine.backends.choose import ORDER
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.limits import AUTO_FIRST_S, LIVE_CHECK_S
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
            return _schema_check(Constraint.from_inputs("schema", text, ws), backend, hub)
        ok = f"\u2713 looks valid{html.escape(more)}"
        return f'<div class="cfsm-muted" style="color:#15803d">{ok}</div>'
    except CfsmError as exc:
        return error_line(exc)


def _muted(text: str, ok: bool = False) -> str:
    colour = ' style="color:#15803d"' if ok else ""
    body = html.escape(for_the_page(text))
    return f'<div class="cfsm-muted" id="live-check"{colour}>{body}</div>'


def _schema_check(c: Constraint, backend: str, hub: EngineHub | None) -> str:
    """A schema as Run will take it, said while typing: fsm's automaton built by the live
    check's own worker within LIVE_CHECK_S (cached for Run: a refusal here is Run's own),
    and where fsm cannot hold it, the native backend `auto` goes to, compiled as Run
    compiles it (`_native_check`). A tick only where Run compiles it on the backend it
    names."""
    eng = hub.peek() if hub is not None else None
    if backend not in (AUTO, "fsm", "outlines"):
        return _native_check(c, backend, "", eng)
    if eng is None:  # no worker yet: the schema's lowering alone
        schema_to_regex(c.text, c.whitespace)
        return _muted("\u2713 valid schema (its automaton is checked once the model is loaded)")
    try:
        got = eng.try_automaton(c)
    except CfsmError as exc:
        if backend != AUTO:
            return error_line(exc)
        return _native_check(c, None, f"fsm cannot hold it ({exc.message}); ", eng)
    if got.dfa is not None:
        on = "auto runs it on fsm" if backend == AUTO else f"{backend} compiles it"
        return _muted(f"\u2713 valid schema: {got.dfa.num_states:,} automaton states; {on}", True)
    if got.why_not == "slow" and backend == AUTO:
        then = " then ".join(ORDER["schema"][1:])  # what auto tries after fsm, in order
        return _muted(
            f"valid schema; fsm's automaton takes longer than {LIVE_CHECK_S:g} s to build: "
            f"Run gives fsm up to {AUTO_FIRST_S:g} s, then tries {then}"
        )
    return _muted("\u2713 valid schema (its automaton is being built)")


def _native_check(c: Constraint, backend: str | None, head: str, eng=None) -> str:
    """`backend` (None: each native backend auto would try, in its order) compiled as Run
    compiles it (the compile cache: Run reuses it), waited for up to LIVE_CHECK_S; its audit
    alone let through schemas its library then refused (`oneOf` on llguidance)."""
    names = [backend] if backend else list(ORDER["schema"][1:])
    verb = "auto runs it on" if backend is None else "runs on"
    why = []
    for name in names:
        try:
            audit(get_backend(name), c)
            if eng is not None:
                eng.cache.submit(c, name).result(timeout=LIVE_CHECK_S)
        except cf.TimeoutError:
            return _muted(f"{head}valid schema; {name} is still compiling it (Run waits for it)")
        except CfsmError as exc:
            why.append(f"{name}: {exc.message}")
            continue
        except Exception as exc:  # noqa: BLE001 - a library's failure: Run's compile_failed
            why.append(f"{name} failed to compile it: {' '.join(str(exc).split())}")
            continue
        return _muted(f"{head}\u2713 valid schema; {verb} {name}", not head)
    return error_line(CfsmError("unsupported_feature", head + "; ".join(why)))


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
