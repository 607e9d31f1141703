"""A separate interpreter that runs compiles on request (length-prefixed pickles over
stdin/stdout): character DFAs, and the compiles of backends whose libraries cannot be
interrupted (`GrammarBackend.compiles_in_worker`: outlines-core's Index, xgrammar,
llguidance). It is a
plain subprocess rather than multiprocessing so that it never re-imports the caller's
main module, and the server can kill it at any moment: at the time limit, or when its
memory passes the cap (engine/limits.py), so a runaway compile leaves nothing running.

Requests and answers:
- ("dfa", pattern, max_states, max_chars) -> ("ok", CharDFA)
- ("vocab", fingerprint, token_bytes, eos_token_id, tokenizer_json) -> ("ok", None), once
  per tokenizer (the JSON is the Hugging Face tokenizer's, for llguidance; may be None)
- ("warm", backend, fingerprint) -> ("ok", None): the library's own view of the vocabulary
- ("native", backend, fingerprint, constraint, dfa) -> ("ok", payload bytes), which the
  backend's `load_compiled` turns back into a compiled constraint in the server, or
  ("ok", None) when the backend finds compiling again there cheaper (`repeat_in_server`)
- any failure -> ("error", kind, message)"""

from __future__ import annotations

import pickle
import struct
import sys
import time

from ..errors import CfsmError
from ..regex.dfa import build_char_dfa


def read_message(stream):
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    return pickle.loads(stream.read(n))


def write_message(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<I", len(data)) + data)
    stream.flush()


class _Jobs:
    """The worker's state: one tokenizer context per vocabulary it was sent."""

    def __init__(self) -> None:
        self.contexts: dict = {}

    def run(self, req: tuple):
        kind = req[0]
        if kind == "dfa":
            _, pattern, max_states, max_chars = req
            return build_char_dfa(pattern, max_states, max_chars)
        # a worker that only builds DFAs never loads the backends (numpy and every adapter:
        # 0.2 s and 20 MB more at each start, all of it inside the compile memory cap there)
        from .. import backends  # deliberately lazy: keeps a DFA-only worker light

        if kind == "vocab":
            _, fingerprint, token_bytes, eos, tokenizer_json = req
            self.contexts[fingerprint] = backends.TokenizerContext.from_token_bytes(
                token_bytes, eos, tokenizer_json
            )
            return None
        if kind == "warm":
            _, name, fingerprint = req
            backends.get_backend(name).warm(self.contexts[fingerprint])
            return None
        if kind == "native":
            _, name, fingerprint, constraint, dfa = req
            backend = backends.get_backend(name)
            t0 = time.perf_counter()
            compiled = backend.compile_native(constraint, self.contexts[fingerprint], dfa=dfa)
            if backend.repeat_in_server(compiled, time.perf_counter() - t0):
                return None
            return backend.dump_compiled(compiled)
        raise ValueError(f"unknown job {kind!r}")


def main() -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    jobs = _Jobs()
    while True:
        req = read_message(inp)
        if req is None:
            return
        try:
            write_message(out, ("ok", jobs.run(req)))
        except CfsmError as exc:
            write_message(out, ("error", exc.kind, exc.message))
        except Exception as exc:  # noqa: BLE001
            kind = "invalid_regex" if req[0] == "dfa" else "compile_failed"
            what = "cannot compile regex" if req[0] == "dfa" else f"{req[1]} failed to compile"
            write_message(out, ("error", kind, f"{what}: {' '.join(str(exc).split())[:300]}"))


if __name__ == "__main__":
    main()
