"""Typed errors that carry the HTTP status they map to.

Every input problem is raised as one of these before any model is called, so the
CLI can name the bad field and the HTTP layer can answer with the right 4xx.
"""

from __future__ import annotations


class MemrouteError(Exception):
    """Base class; ``status`` is the HTTP status code the error maps to."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequest(MemrouteError):
    status = 400
    code = "invalid_request_error"


class Unauthorized(MemrouteError):
    status = 401
    code = "invalid_api_key"


class NotFound(MemrouteError):
    status = 404
    code = "not_found"


class Forbidden(MemrouteError):
    """Authenticated, but the key's role may not do this (a tenant key on an admin endpoint)."""

    status = 403
    code = "permission_denied"


class MethodNotAllowed(MemrouteError):
    status = 405
    code = "method_not_allowed"


class PayloadTooLarge(MemrouteError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(MemrouteError):
    status = 415
    code = "unsupported_media_type"


class ConfigError(MemrouteError):
    """A configuration value is wrong; ``field`` names it (e.g. ``retrieval.fusion``)."""

    status = 400
    code = "config_error"


class AssetError(MemrouteError):
    """A model asset is missing or corrupt; the message says which and what to run."""

    status = 500
    code = "asset_error"


class BackendError(MemrouteError):
    """A model back end failed (engine crash, HTTP error from an upstream server)."""

    status = 502
    code = "backend_error"


class BackendUnavailable(BackendError):
    """A model tier cannot be reached (engine down, replica gone, call timed out): not the
    request's fault, so the Router skips the tier instead of bisecting the batch to find a culprit."""

    status = 503
    code = "backend_unavailable"


class NoTierAnswered(MemrouteError):
    """Every tier of the cascade failed for a request: 503. ``message`` holds each tier's error
    (for logs); ``public_message`` names the tiers and whether each was down or failed, without
    the engines' own text (a 5xx body never carries it)."""

    status = 503
    code = "tiers_unavailable"

    def __init__(self, message: str, *, public_message: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.public_message = public_message


class RateLimited(MemrouteError):
    """A tenant is over its request or token rate (``api.rate_limits``): 429.

    ``retry_after_s`` is when a retry would be admitted; ``limit_type`` is ``"requests"`` or
    ``"tokens"`` (the ``type`` of OpenAI's 429 body); ``headers`` are extra response headers
    (``x-ratelimit-*``) the limiter computed.
    """

    status = 429
    code = "rate_limit_exceeded"

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float,
        field: str | None = None,
        tenant: str | None = None,
        limit_type: str = "requests",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = float(retry_after_s)
        self.tenant = tenant
        self.limit_type = limit_type
        self.headers = dict(headers or {})
