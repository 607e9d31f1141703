"""What each backend cannot enforce in a JSON schema, found by the conformance benchmark
and checked before compiling: refused with `unsupported_feature` naming the keyword and
its JSON pointer, or (lenient) compiled with a warning that travels with the run."""

from __future__ import annotations

from ..constraint import Constraint
from ..errors import CfsmError


def _walk(node, ptr: str = ""):
    if isinstance(node, dict):
        yield ptr or "/", node
        for k, v in node.items():
            if k in ("enum", "const", "examples", "default"):
                continue
            yield from _walk(v, f"{ptr}/{k.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{ptr}/{i}")


def native_gaps(backend: str, schema) -> list[tuple[str, str, str]]:
    """(keyword, pointer, why) for each construct `backend` is known to mishandle."""
    rules = GAPS.get(backend, [])
    out = []
    for ptr, node in _walk(schema):
        for rule in rules:
            hit = rule(node)
            if hit:
                out.append((hit[0], ptr, hit[1]))
    return out


def _lookaround(node):
    pat = node.get("pattern")
    if isinstance(pat, str) and any(x in pat for x in ("(?=", "(?!", "(?<=", "(?<!")):
        return "pattern", "look-around in a pattern is dropped silently"
    return None


GAPS: dict[str, list] = {"xgrammar": [_lookaround], "llguidance": []}


def audit(backend: str, c: Constraint) -> list[str]:
    """Raise for a gap (unless lenient); return the warnings of what lenient let through."""
    if c.kind != "schema" or backend not in GAPS:
        return []
    warnings = []
    for kw, ptr, why in native_gaps(backend, c.schema_obj()):
        where = f"{ptr.rstrip('/')}/{kw}" if ptr != "/" else f"/{kw}"
        if not c.lenient:
            raise CfsmError("unsupported_feature", f"`{kw}` at {where} is not enforced by {backend}: {why} "
                            "(--lenient compiles it unenforced with a warning; the fsm backend may enforce it)")
        warnings.append(f"`{kw}` at {where} is NOT enforced by {backend}: {why}")
    return warnings
