"""The OpenAI-compatible API under /v1 on the page's own server: `/v1/models`,
`/v1/chat/completions` and `/v1/completions`, decoded by the same continuous batch as the
page's runs. The wire format lives in engine/openai; this module only routes, admits and
streams."""

from __future__ import annotations

import asyncio
import codecs
import json
import threading
import time
import weakref

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine.errors import CfsmError
from engine.openai.errors import ApiError, from_engine, internal, not_found
from engine.openai.request import ApiRequest, read_request
from engine.openai.response import chat_completion, cut_at_stop, new_id, text_completion
from engine.openai.stream import ChunkWriter, answer_so_far

from .state import DECODE_SLOTS, EngineHub

MAX_BODY_BYTES = 2 * 2**20
MAX_WAITING = 32  # requests past the decoding slots that wait for one; more get a 429


class Admission:
    """How many API requests are in the server at once: the decoding slots plus a short
    queue; past that a request is refused at once (429) instead of piling up. Their worker
    threads come from a limiter of the same size, not from the event loop's shared pool
    (where 48 decodes would hold up every other route's thread)."""

    def __init__(self, limit: int = DECODE_SLOTS + MAX_WAITING) -> None:
        self.limit, self.n = limit, 0
        self._lock = threading.Lock()
        self.threads = anyio.CapacityLimiter(max(1, limit))

    def enter(self) -> Slot:
        with self._lock:
            if self.n >= self.limit:
                raise CfsmError("busy", f"the server is full ({self.limit} requests in "
                                "flight); retry shortly")  # fmt: skip
            self.n += 1
        return Slot(self)

    def leave(self) -> None:
        with self._lock:
            self.n -= 1


class Slot:
    """One admitted request; `leave` gives its place back once, whoever calls it first (the
    request's end, or a stream the client left before it began)."""

    def __init__(self, admission: Admission) -> None:
        self.admission, self.left = admission, False
        self._lock = threading.Lock()

    def leave(self) -> None:
        with self._lock:
            if self.left:
                return
            self.left = True
        self.admission.leave()


class ApiRun:
    """One request's decode in a worker thread: its live text for streaming (decoded from
    the output's bytes, an unfinished UTF-8 character held back), the stop switch a gone
    client or a stop string flips, and its result."""

    def __init__(self, eng, api: ApiRequest, on_text=None, compile_cached: bool = False) -> None:
        self.eng, self.api, self.on_text = eng, api, on_text
        self.compile_cached = compile_cached  # as the request's first compile found it
        self.stop = threading.Event()
        self.token_bytes = eng.ctx.vocab.token_bytes

    def live_text(self, tokens) -> str:
        """The output so far; a special token (no bytes: a `<think>` or `<tool_call>` some
        models have as one token) as its text, so that the tags split the live text as
        they split the finished one."""
        tb = self.token_bytes
        raw = b"".join(tb[t.id] if tb[t.id] is not None else t.text.encode() for t in tokens)
        return codecs.getincrementaldecoder("utf-8")("replace").decode(raw, final=False)

    def on_event(self, kind: str, data) -> None:
        if kind != "step":
            return
        text = self.live_text(data.tokens)
        if self.api.stop:
            answer = answer_so_far(text, self.api)[1]
            if answer is not None and cut_at_stop(answer, self.api.stop) is not None:
                self.stop.set()  # the answer is complete: the rest would be cut anyway
        if self.on_text is not None:
            self.on_text(text)

    def __call__(self) -> dict:
        listen = self.on_text is not None or bool(self.api.stop)  # else no per-step work
        trace = self.eng.generate(self.api.gen, on_event=self.on_event if listen else None,
                                  should_stop=self.stop.is_set)  # fmt: skip
        # generate's own compile found _prepare's in the cache: say whether _prepare's was
        trace.totals.compile_cached = self.compile_cached
        return trace.to_json()


def _prepare(eng, api: ApiRequest) -> bool:
    """The request's prompt rendered (a chat template that cannot render the messages) and
    its constraint compiled (cached for the run), ahead of the decode; whether that compile
    was in the cache already."""
    g = api.gen
    eng.ensure_model(g.runtime).prompt_ids(g.prompt, g.raw_prompt, g.messages, g.tools)
    return eng.compile_request(g)[2] if g.mode != "free" else False


def _api_error(exc: BaseException, param: str | None = None) -> ApiError:
    if isinstance(exc, CfsmError):
        return from_engine(exc, param)
    return exc if isinstance(exc, ApiError) else internal(exc)


def _error(exc: BaseException, param: str | None = None) -> JSONResponse:
    exc = _api_error(exc, param)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


async def ready_engine(hub: EngineHub):
    """The served engine; a request sent while the model loads waits for it (up to the
    hub's `load_wait_s`, CFSM_LOAD_WAIT_S), as vLLM's would find the server only once it
    is ready. A model that failed to load is a 503 at once; one still loading past the
    wait, a 503 `model_loading` with Retry-After."""
    hub.start()
    wait_s = hub.load_wait_s
    deadline = time.monotonic() + wait_s
    while True:
        eng = hub.peek()
        if eng is not None:
            return eng
        line = hub.status()
        if line.startswith("Model failed"):
            raise ApiError(503, line, "server_error", code="model_failed")
        if time.monotonic() >= deadline:
            raise CfsmError("model_loading", f"the model is not ready after {wait_s:g} s "
                            f"({line}); retry shortly")  # fmt: skip
        await asyncio.sleep(0.1)


def model_ids(hub: EngineHub) -> list[str]:
    """The names a request's `model` may give: the one the server was started with
    ("embedded", a Hugging Face id, a path), as `cfsm serve --model` took it."""
    return [hub.default]


async def read_body(request: Request) -> dict:
    """The request's JSON body, within MAX_BODY_BYTES (413 past it, 400 if not JSON)."""
    if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is over {MAX_BODY_BYTES // 2**20} MB",
                       code="input_too_large")  # fmt: skip
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is over {MAX_BODY_BYTES // 2**20} MB",
                       code="input_too_large")  # fmt: skip
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not JSON: {exc}", code="invalid_json") from None


def openai_router(hub: EngineHub, max_in_flight: int = DECODE_SLOTS + MAX_WAITING) -> APIRouter:
    router = APIRouter(prefix="/v1")
    admission = Admission(max_in_flight)
    hub.metrics.count_in_flight(lambda: admission.n)

    @router.get("/models")
    async def list_models():
        try:  # listed once it can be used: a readiness check on it does not pass early
            await ready_engine(hub)
        except (ApiError, CfsmError) as exc:
            return _error(exc)
        return {"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "cfsm-lab"}
            for m in model_ids(hub)]}  # fmt: skip

    async def complete(request: Request, endpoint: str):
        try:
            body = await read_body(request)
            api = read_request(body, endpoint, model_ids(hub))
            eng = await ready_engine(hub)
            slot = admission.enter()
        except Exception as exc:  # noqa: BLE001 - one JSON error (a 500 for our own bugs)
            return _error(exc)
        threads = admission.threads
        try:  # what can fail before decoding fails before a stream starts: a 400
            cached = await anyio.to_thread.run_sync(_prepare, eng, api, limiter=threads)
        except Exception as exc:  # noqa: BLE001 - one JSON error, the server goes on
            slot.leave()
            return _error(exc, api.constraint_field)
        chat = endpoint == "chat"
        cid = new_id("chatcmpl" if chat else "cmpl")
        if api.stream:
            chunks = _stream(ApiRun(eng, api, compile_cached=cached), cid, chat, hub, slot)
            weakref.finalize(chunks, slot.leave)  # a client gone before the stream began
            return StreamingResponse(
                chunks,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            trace = await _decode(ApiRun(eng, api, compile_cached=cached), request, threads)
            tid = await anyio.to_thread.run_sync(hub.traces.put, trace, limiter=threads)
            hub.metrics.finished(trace)
            build = chat_completion if chat else text_completion
            return JSONResponse(build(trace, api, cid, tid))
        except Exception as exc:  # noqa: BLE001 - (a cancelled request is not answered)
            return _error(exc)
        finally:
            slot.leave()

    async def counted(request: Request, endpoint: str):
        response = await complete(request, endpoint)
        code = _error_code(response) if response.status_code >= 400 else None
        hub.metrics.answered(response.status_code, code)  # a stream as it starts: 200
        return response

    @router.post("/chat/completions")
    async def chat_completions(request: Request):
        return await counted(request, "chat")

    @router.post("/completions")
    async def completions(request: Request):
        return await counted(request, "completions")

    known = {r.path for r in router.routes}

    @router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown(request: Request, rest: str):  # last: every other /v1 path
        path = request.url.path
        return _error(not_found(path, request.method, path in known))

    return router


def _error_code(response) -> str | None:
    """The `code` of an error response's OpenAI-shaped body."""
    try:
        return json.loads(response.body)["error"]["code"]
    except (AttributeError, ValueError, KeyError, TypeError):
        return None


async def _decode(run: ApiRun, request: Request, threads) -> dict:
    """The run in a worker thread; a client that goes away stops it at the next step."""

    async def watch():
        while not run.stop.is_set():
            if await request.is_disconnected():
                run.stop.set()
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch())
    try:
        return await anyio.to_thread.run_sync(run, limiter=threads)
    finally:
        watcher.cancel()


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


async def _stream(run: ApiRun, cid: str, chat: bool, hub: EngineHub, slot: Slot):
    """Server-sent chunks as the run decodes; an error after the start is one `error`
    event (the client raises it), then [DONE]."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    writer = ChunkWriter(run.api, cid, chat)
    run.on_text = lambda t: loop.call_soon_threadsafe(queue.put_nowait, t)

    def work():
        try:
            result = ("done", run())
        except BaseException as exc:  # noqa: BLE001 - sent as an error event
            result = ("error", exc)
        loop.call_soon_threadsafe(queue.put_nowait, result)

    threading.Thread(target=work, daemon=True, name=f"api-{cid}").start()
    try:
        for c in writer.start():
            yield _sse(c)
        last = 0.0
        while True:
            item = await queue.get()
            if isinstance(item, str):
                if time.monotonic() - last > 0.05 or queue.empty():
                    last = time.monotonic()
                    for c in writer.live(item):
                        yield _sse(c)
                continue
            kind, value = item
            if kind == "error":
                err = _api_error(value)
                hub.metrics.stream_failed(err.status, err.code)
                yield _sse(err.body())
            else:
                tid = await anyio.to_thread.run_sync(
                    hub.traces.put, value, limiter=slot.admission.threads
                )
                hub.metrics.finished(value)
                for c in writer.finish(value, tid):
                    yield _sse(c)
            break
        yield b"data: [DONE]\n\n"
    finally:
        run.stop.set()  # a client that left mid-stream stops the run at its next step
        slot.leave()
