"""OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}`, with the HTTP
status the official client turns into its own exception class."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CfsmError, ErrorKind

# seconds a client waits before sending a retryable request again, by HTTP status
RETRY_AFTER_S = {429: 1, 503: 5}


@dataclass
class ApiError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    retry_after: int | None = None  # seconds, sent as Retry-After (429, 503)

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


def bad_request(message: str, param: str | None = None, code: str = "invalid_input") -> ApiError:
    return ApiError(400, message, param=param, code=code)


_TYPES = {404: "not_found_error", 429: "rate_limit_error"}


def from_engine(exc: CfsmError, param: str | None = None) -> ApiError:
    """An engine error as the client sees it: its kind's HTTP status (errors.ErrorKind),
    the kind as the code, and `Retry-After` where the same request may succeed later (the
    official clients retry 408, 409, 429 and 5xx, never 400)."""
    spec = exc.spec
    kind = _TYPES.get(spec.status, "invalid_request_error" if spec.status < 500 else "server_error")
    retry = RETRY_AFTER_S.get(spec.status, 1) if spec.retryable else None
    return ApiError(spec.status, f"{exc.kind}: {exc.message}", kind, param, exc.kind, retry)


def not_found(path: str, method: str, known: bool) -> ApiError:
    """Any other /v1 path (or a known one with another method), in OpenAI's shape."""
    if known:
        return ApiError(405, f"{method} is not allowed on {path}", code="method_not_allowed")
    return ApiError(
        404, f"no such endpoint: {method} {path}", "not_found_error", code="unknown_endpoint"
    )


def internal(exc: BaseException) -> ApiError:
    """An unexpected exception: a 500 with kind `internal` (a bug; each has a test)."""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    return ApiError(
        500, f"internal error: {msg}", "server_error", code=ErrorKind.INTERNAL.name.lower()
    )
