"""Typed configuration of the HTTP API (limits, tenancy, served model names): the ``api`` group
of the serve config, so errors name ``api.limits.max_input_chars``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from memroute.errors import ConfigError, InvalidRequest
from memroute.namespace import validate_tenant
from memroute.types import validate_user_id


@dataclass
class ApiLimits:
    max_input_chars: int = 32000  # characters of message content per request (413 above)
    max_tokens: int = 1024  # largest max_tokens a client may ask for (400 above)
    max_messages: int = 256  # messages per request (413 above)
    max_user_chars: int = 256  # length of the OpenAI `user` string (400 above)
    max_body_bytes: int = 1_000_000  # raw request body, refused while it streams in (413)
    max_json_depth: int = 32  # nesting of arrays/objects, checked before parsing (400 above)


@dataclass
class RateLimitConfig:
    """One tenant's rate limits (429 with ``retry-after`` above them); None: unlimited.

    Requests: a token bucket of ``burst`` requests refilled at ``requests_per_s``. Tokens: a
    bucket of ``tokens_per_min`` (prompt + completion tokens of every call of the cascade)
    refilled at ``tokens_per_min / 60`` per second. A request's tokens are known only once it is
    answered, so they are charged afterwards: a request is admitted while the tenant's token
    bucket is not in debt, its actual usage is then charged (the bucket may go below zero), and
    the tenant's next requests are refused until the refill brings it back to zero. A tenant can
    therefore exceed ``tokens_per_min`` by the requests it had in flight; not by more.
    """

    requests_per_s: Optional[float] = None
    burst: Optional[int] = None  # requests admitted at once; None: max(1, ceil(requests_per_s))
    tokens_per_min: Optional[int] = None

    @property
    def limited(self) -> bool:
        return self.requests_per_s is not None or self.tokens_per_min is not None

    @property
    def request_burst(self) -> int | None:
        """The size of the request bucket (None without a request limit)."""
        if self.requests_per_s is None:
            return None
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil(self.requests_per_s))


@dataclass
class ApiConfig:
    limits: ApiLimits = field(default_factory=ApiLimits)
    # Names a client may put in `model`; each is answered by the routed cascade.
    models: list[str] = field(default_factory=lambda: ["memroute"])
    # Memory namespace user when a request carries no `user`.
    default_user: str = "default"
    # API key -> tenant. Prefer the environment variable below: config files get committed.
    api_keys: dict[str, str] = field(default_factory=dict)
    # Environment variable(s) holding "key1:tenantA,key2:tenantB"; read when the keys are built.
    api_keys_env: list[str] = field(default_factory=lambda: ["MEMROUTE_API_KEYS"])
    # Local development only: requests without an Authorization header act as this tenant.
    # An Authorization header with a wrong key is still refused.
    anonymous_tenant: Optional[str] = None
    # Operator keys (/metrics, /openapi.json, /admin/*): a role of their own, never a tenant.
    admin_keys: list[str] = field(default_factory=list)
    admin_keys_env: list[str] = field(default_factory=lambda: ["MEMROUTE_ADMIN_KEYS"])  # "k1,k2"
    # Tenant label on /metrics: plain names, hashed (stable, not reversible), or off (one "all").
    metrics_tenant_labels: str = "plain"
    # Rate limits of every tenant, and per-tenant overrides (tenant -> limits). An override
    # replaces the default as a whole: a field it leaves unset is unlimited for that tenant.
    rate_limits: RateLimitConfig = field(default_factory=RateLimitConfig)
    tenant_rate_limits: dict[str, RateLimitConfig] = field(default_factory=dict)
    # The `tau` a request may set for itself (memroute.tau), [low, high].
    tau_range: list[float] = field(default_factory=lambda: [0.0, 1.0])


METRICS_TENANT_LABELS = ("plain", "hashed", "off")


def check_api_config(cfg: ApiConfig, *, prefix: str = "api") -> ApiConfig:
    """Refuse impossible values, naming the field (``api.limits.max_tokens``)."""
    lim = cfg.limits
    names = ("max_input_chars", "max_tokens", "max_messages", "max_user_chars", "max_body_bytes",
             "max_json_depth")
    for name in names:
        value = getattr(lim, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"{prefix}.limits.{name} must be a positive integer, got {value!r}",
                field=f"{prefix}.limits.{name}",
            )
    if not cfg.models or not all(isinstance(m, str) and m.strip() for m in cfg.models):
        raise ConfigError(
            f"{prefix}.models must list at least one non-empty model name, got {cfg.models!r}",
            field=f"{prefix}.models",
        )
    if cfg.metrics_tenant_labels not in METRICS_TENANT_LABELS:
        raise ConfigError(
            f"{prefix}.metrics_tenant_labels must be one of {', '.join(METRICS_TENANT_LABELS)}, "
            f"got {cfg.metrics_tenant_labels!r}",
            field=f"{prefix}.metrics_tenant_labels",
        )
    tr = cfg.tau_range
    if (len(tr) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in tr)
            or not 0.0 <= tr[0] <= tr[1] <= 1.0):
        raise ConfigError(f"{prefix}.tau_range must be [low, high] with 0 <= low <= high <= 1, "
                          f"got {tr!r}", field=f"{prefix}.tau_range")
    check_rate_limits(cfg.rate_limits, prefix=f"{prefix}.rate_limits")
    for tenant, limits in cfg.tenant_rate_limits.items():
        try:
            validate_tenant(tenant, field_name=f"{prefix}.tenant_rate_limits")
        except InvalidRequest as exc:
            raise ConfigError(exc.message, field=f"{prefix}.tenant_rate_limits") from exc
        check_rate_limits(limits, prefix=f"{prefix}.tenant_rate_limits.{tenant}")
    try:
        validate_user_id(cfg.default_user, field_name=f"{prefix}.default_user")
    except InvalidRequest as exc:  # the same message, as a configuration error
        raise ConfigError(str(exc), field=f"{prefix}.default_user") from exc
    return cfg


def check_rate_limits(
    limits: RateLimitConfig, *, prefix: str = "api.rate_limits"
) -> RateLimitConfig:
    """Positive numbers or None, naming the field (``api.tenant_rate_limits.acme.burst``)."""
    if not isinstance(limits, RateLimitConfig):
        raise ConfigError(
            f"{prefix} must be a mapping of requests_per_s, burst, tokens_per_min, "
            f"got {type(limits).__name__}",
            field=prefix,
        )
    rps = limits.requests_per_s
    if rps is not None and (
        isinstance(rps, bool) or not isinstance(rps, (int, float)) or not math.isfinite(rps)
        or rps <= 0
    ):
        raise ConfigError(
            f"{prefix}.requests_per_s must be a positive number or null (unlimited), got {rps!r}",
            field=f"{prefix}.requests_per_s",
        )
    for name in ("burst", "tokens_per_min"):
        value = getattr(limits, name)
        bad = isinstance(value, bool) or not isinstance(value, int) or value < 1
        if value is not None and bad:
            raise ConfigError(
                f"{prefix}.{name} must be a positive integer or null, got {value!r}",
                field=f"{prefix}.{name}",
            )
    if limits.burst is not None and rps is None:
        raise ConfigError(
            f"{prefix}.burst needs {prefix}.requests_per_s (a burst of an unlimited rate)",
            field=f"{prefix}.burst",
        )
    return limits
