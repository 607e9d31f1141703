"""The trace: the JSON contract between the engine, viz/ and app/.

Version history: 1 = first release. Readers check `version` and refuse newer majors.
"""

from __future__ import annotations

import json

from .errors import CfsmError

TRACE_VERSION = 1
REQUIRED_KEYS = ("version", "mode", "text", "tokens", "steps", "jumps", "totals")


def validate_trace(obj) -> dict:
    """Check that an uploaded/loaded object is a trace this version can show."""
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as exc:
            raise CfsmError("invalid_input", f"trace is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise CfsmError("invalid_input", "a trace must be a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise CfsmError("invalid_input", f"not a cfsm trace: missing {', '.join(missing)}")
    if not isinstance(obj["version"], int) or obj["version"] > TRACE_VERSION:
        raise CfsmError("invalid_input", f"trace version {obj['version']!r} is newer than this app ({TRACE_VERSION})")
    return obj
