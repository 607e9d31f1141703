"""The endpoints a deployment expects of a serving engine, as vLLM has them, beside /v1:
`/health` for a load balancer's readiness probe, `/version`, `/tokenize` and `/detokenize`,
and `/metrics` for Prometheus. Routing only: the wire format lives in engine/openai, the
metrics in engine/serving/metrics."""

from __future__ import annotations

import importlib.metadata

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from engine.errors import CfsmError
from engine.openai.errors import ApiError, from_engine
from engine.openai.tokenization import detokenize, tokenize

from .openai_routes import model_ids, read_body, ready_engine
from .state import EngineHub

RETRY_AFTER_LOADING_S = 5  # /health's Retry-After while the model loads


def package_version() -> str:
    try:
        return importlib.metadata.version("cfsm-lab")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree not installed
        return "unknown"


def _ready(hub: EngineHub):
    """The served engine, or the 503 a probe reads as not ready (never starts a load:
    `cfsm serve` started it; a probe must not load models)."""
    eng = hub.peek()
    if eng is not None:
        return eng
    line = hub.status()
    if line.startswith("Model failed"):
        raise ApiError(503, line, "server_error", code="model_failed")
    raise ApiError(503, f"the model is not ready yet ({line}); retry shortly", "server_error",
                   code="model_loading", retry_after=RETRY_AFTER_LOADING_S)  # fmt: skip


def _error(exc: ApiError | CfsmError) -> JSONResponse:
    err = from_engine(exc) if isinstance(exc, CfsmError) else exc
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers())


def serving_router(hub: EngineHub) -> APIRouter:
    router = APIRouter()

    @router.api_route("/health", methods=["GET", "HEAD"])
    def health():
        try:
            _ready(hub)
        except ApiError as exc:
            return _error(exc)
        return Response(status_code=200)  # an empty 200, as vLLM's

    @router.get("/version")
    def version():
        eng = hub.peek()
        return {"version": package_version(), "model": hub.default,
                "runtime": getattr(eng, "runtime", None)}  # fmt: skip

    async def answer(request: Request, work) -> JSONResponse:
        try:
            body = await read_body(request)
            eng = await ready_engine(hub)
            out = await anyio.to_thread.run_sync(work, eng, body, model_ids(hub))
        except (ApiError, CfsmError) as exc:
            return _error(exc)
        return JSONResponse(out)

    @router.post("/tokenize")
    async def tokenize_route(request: Request):
        return await answer(request, tokenize)

    @router.post("/detokenize")
    async def detokenize_route(request: Request):
        return await answer(request, detokenize)

    @router.get("/metrics")
    def metrics():
        text, content_type = hub.metrics.render()
        return Response(text, media_type=content_type)

    return router
