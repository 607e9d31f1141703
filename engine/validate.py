"""Is a finished output valid? Checked independently of the backend that produced it:
JSON schemas with the `jsonschema` library, regexes with Python's `re.fullmatch`, grammars
by the backend's own acceptance (there is no second grammar engine to ask)."""

from __future__ import annotations

import json
import re

from .constraint import Constraint


def validate_output(constraint: Constraint | None, text: str, finished: bool, reason: str,
                    accepted: bool | None) -> tuple[bool | None, str]:
    """(valid, one-line message). `valid` is None when there is nothing to check against
    (free decoding, or a regex Python cannot compile), False for an unfinished output."""
    if constraint is None:
        return None, "free decoding: no constraint to validate against"
    if not finished:
        return False, f"not finished ({reason}): the output is incomplete"
    if constraint.kind == "schema":
        return _check_schema(constraint, text)
    if constraint.kind == "regex":
        try:
            # ASCII: the engine spells \w \d \s (and their negations) in ASCII for every backend
            pattern = re.compile(constraint.text, re.ASCII)
        except (re.error, OverflowError, RecursionError) as exc:
            return None, f"Python's re cannot check this regex ({exc})"
        if pattern.fullmatch(text):
            return True, "matches the regex (re.fullmatch)"
        return False, "does not match the regex (re.fullmatch)"
    return bool(accepted), "the grammar accepts it (backend)" if accepted else "the grammar does not accept it (backend)"


def _check_schema(constraint: Constraint, text: str) -> tuple[bool, str]:
    import jsonschema

    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; so are huge integers
        return False, " ".join(f"not JSON: {exc}".split())[:300]
    try:
        schema = constraint.schema_obj()
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        err = jsonschema.exceptions.best_match(cls(schema).iter_errors(doc))
    except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref: say so, do not fail the run
        return None, " ".join(f"could not check against the schema: {exc}".split())[:300]
    if err is None:
        return True, f"valid against the schema ({cls.__name__.replace('Validator', '')})"
    where = "/" + "/".join(str(p) for p in err.absolute_path)
    return False, " ".join(f"at {where}: {err.message}".split())[:300]
