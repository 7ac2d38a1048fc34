"""Typed configuration of the HTTP API (limits, tenancy, served model names): the ``api`` group
of the serve config, so errors name ``api.limits.max_input_chars``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.errors import ConfigError, InvalidRequest
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
    try:
        validate_user_id(cfg.default_user, field_name=f"{prefix}.default_user")
    except InvalidRequest as exc:  # the same message, as a configuration error
        raise ConfigError(str(exc), field=f"{prefix}.default_user") from exc
    return cfg
