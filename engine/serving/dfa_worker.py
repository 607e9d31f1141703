"""A separate interpreter that builds character DFAs on request (length-prefixed pickles
over stdin/stdout). It is a plain subprocess rather than multiprocessing so that it never
re-imports the caller's main module, and it can be killed at any moment."""

from __future__ import annotations

import pickle
import struct
import sys


def _read(stream):
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    return pickle.loads(stream.read(n))


def _write(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<I", len(data)) + data)
    stream.flush()


def main() -> None:
    from ..errors import CfsmError
    from ..regex.dfa import build_char_dfa

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        req = _read(inp)
        if req is None:
            return
        pattern, max_states, max_chars = req
        try:
            _write(out, ("ok", build_char_dfa(pattern, max_states, max_chars)))
        except CfsmError as exc:
            _write(out, ("error", exc.kind, exc.message))
        except Exception as exc:  # noqa: BLE001
            _write(out, ("error", "invalid_regex", f"cannot compile regex: {exc}"))


if __name__ == "__main__":
    main()
