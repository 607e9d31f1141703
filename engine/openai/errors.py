"""OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}`, with the HTTP
status the official client turns into its own exception class."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CfsmError

# engine error kinds that are the server's state, not the request's fault
_STATUS = {"unknown_model": 404, "unsupported_runtime": 503}


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


def from_engine(exc: CfsmError, param: str | None = None) -> ApiError:
    """An engine error as the client sees it: 400 with the engine's kind as the code (an
    invalid regex, an unsatisfiable schema, a compile past its limit...)."""
    status = _STATUS.get(exc.kind, 400)
    kind = "invalid_request_error" if status < 500 else "server_error"
    return ApiError(status, f"{exc.kind}: {exc.message}", kind, param, exc.kind)
