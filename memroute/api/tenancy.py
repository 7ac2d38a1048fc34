"""API keys -> tenants, and the operator (admin) keys. The key table is the only source of a
request's tenant; the memory namespace built from (tenant, user) is :mod:`memroute.namespace`.
Admin keys are a role of their own: they open the operator surfaces (/metrics, /openapi.json,
/admin/*) and belong to no tenant, so a tenant's key never reads another tenant's data there."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memroute.config.api import ApiConfig
from memroute.errors import ConfigError, Forbidden, InvalidRequest, Unauthorized
from memroute.namespace import validate_tenant


@dataclass(frozen=True)
class _Entry:
    digest: bytes  # SHA-256 of the key: fixed-length, constant-time comparison
    tenant: str


class ApiKeys:
    """The key -> tenant table. Keys are held only as SHA-256 digests."""

    def __init__(
        self,
        keys: Mapping[str, str],
        *,
        anonymous_tenant: str | None = None,
        admin_keys: Iterable[str] = (),
    ) -> None:
        entries = []
        for i, (key, tenant) in enumerate(keys.items()):
            if not isinstance(key, str) or not key.strip() or key != key.strip():
                raise ConfigError(
                    f"API key #{i} is empty or has surrounding spaces", field="api.api_keys"
                )
            try:
                validate_tenant(tenant, field_name="api.api_keys")
            except InvalidRequest as exc:
                raise ConfigError(f"API key #{i}: {exc.message}", field="api.api_keys") from exc
            entries.append(_Entry(_digest(key), tenant))
        if anonymous_tenant is not None:
            try:
                validate_tenant(anonymous_tenant, field_name="api.anonymous_tenant")
            except InvalidRequest as exc:
                raise ConfigError(exc.message, field="api.anonymous_tenant") from exc
        self._entries = tuple(entries)
        self.anonymous_tenant = anonymous_tenant
        admins = []
        for i, key in enumerate(admin_keys):
            if not isinstance(key, str) or not key.strip() or key != key.strip():
                raise ConfigError(f"admin key #{i} is empty or has surrounding spaces", field="api.admin_keys")
            if key in keys:
                raise ConfigError(f"admin key #{i} is also a tenant's API key; give operators their own",
                                  field="api.admin_keys")
            admins.append(_digest(key))
        self._admin = tuple(admins)

    @classmethod
    def from_config(
        cls,
        keys: Mapping[str, str] | None = None,
        env_vars: Iterable[str] | str = (),
        *,
        environ: Mapping[str, str] | None = None,
        anonymous_tenant: str | None = None,
        admin_keys: Iterable[str] = (),
        admin_env_vars: Iterable[str] = (),
    ) -> ApiKeys:
        """Keys from config plus each env var (``"key1:tenantA,key2:tenantB"``); admin keys
        from config plus each admin env var (``"key1,key2"``)."""
        merged: dict[str, str] = {}
        sources: list[tuple[str, Mapping[str, str]]] = [("api.api_keys", dict(keys or {}))]
        env = os.environ if environ is None else environ
        for name in [env_vars] if isinstance(env_vars, str) else env_vars:
            sources.append((name, parse_key_list(env.get(name, ""), source=name)))
        for source, table in sources:
            for key, tenant in table.items():
                if merged.get(key, tenant) != tenant:
                    # Never echo the key itself.
                    raise ConfigError(
                        f"an API key from {source} is already mapped to tenant "
                        f"{merged[key]!r}, not {tenant!r}",
                        field=source,
                    )
                merged[key] = tenant
        if not merged and anonymous_tenant is None:
            names = ", ".join([env_vars] if isinstance(env_vars, str) else env_vars) or "none"
            raise ConfigError(
                f"no API keys configured (api.api_keys is empty, env vars: {names}); "
                "set api.anonymous_tenant for an unauthenticated local server",
                field="api.api_keys",
            )
        admins = list(admin_keys)
        for name in admin_env_vars:
            admins += [k.strip() for k in env.get(name, "").split(",") if k.strip()]
        return cls(merged, anonymous_tenant=anonymous_tenant, admin_keys=dict.fromkeys(admins))

    @classmethod
    def from_api_config(
        cls, cfg: ApiConfig, *, environ: Mapping[str, str] | None = None
    ) -> ApiKeys:
        return cls.from_config(
            cfg.api_keys, cfg.api_keys_env, environ=environ, anonymous_tenant=cfg.anonymous_tenant,
            admin_keys=cfg.admin_keys, admin_env_vars=cfg.admin_keys_env,
        )

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(e.tenant for e in self._entries)

    def authenticate(self, authorization: str | None) -> str:
        """The tenant of an ``Authorization: Bearer <key>`` header, else :class:`Unauthorized`."""
        if authorization is None or not authorization.strip():
            if self.anonymous_tenant is not None:
                return self.anonymous_tenant
            raise Unauthorized(
                "missing API key: send 'Authorization: Bearer <API key>'", field="authorization"
            )
        digest = _bearer_digest(authorization)
        if any(hmac.compare_digest(a, digest) for a in self._admin):
            raise Forbidden("an admin key opens the operator endpoints only; use a tenant's API key",
                            field="authorization")
        found: str | None = None
        for entry in self._entries:  # no early exit: time does not depend on which key matched
            if hmac.compare_digest(entry.digest, digest):
                found = entry.tenant
        if found is None:
            raise Unauthorized("invalid API key", field="authorization")
        return found

    def authenticate_admin(self, authorization: str | None) -> None:
        """Pass for an admin key; 401 without a valid key, 403 for a tenant's key."""
        if authorization is None or not authorization.strip():
            raise Unauthorized("this endpoint needs an admin key: send 'Authorization: Bearer <admin key>'",
                               field="authorization")
        digest = _bearer_digest(authorization)
        matched = False
        for a in self._admin:  # no early exit, as for tenant keys
            matched |= hmac.compare_digest(a, digest)
        if matched:
            return
        if any(hmac.compare_digest(e.digest, digest) for e in self._entries):
            hint = "" if self._admin else " (none is configured: set api.admin_keys or MEMROUTE_ADMIN_KEYS)"
            raise Forbidden(f"this endpoint needs an admin key, not a tenant's API key{hint}",
                            field="authorization")
        raise Unauthorized("invalid admin key", field="authorization")


def _bearer_digest(authorization: str) -> bytes:
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("malformed Authorization header: expected 'Bearer <API key>'",
                           field="authorization")
    return _digest(token)


def parse_key_list(text: str, *, source: str) -> dict[str, str]:
    """``"key1:tenantA, key2:tenantB"`` -> mapping. A key may contain ``:``; a tenant may not."""
    out: dict[str, str] = {}
    for i, item in enumerate(text.split(",")):
        item = item.strip()
        if not item:
            continue
        key, sep, tenant = item.rpartition(":")
        key, tenant = key.strip(), tenant.strip()
        if not sep or not key or not tenant:
            raise ConfigError(
                f"{source}: entry #{i} is not 'key:tenant'", field=source
            )  # the entry is not shown: it may hold a key
        if out.get(key, tenant) != tenant:
            raise ConfigError(
                f"{source}: entry #{i} maps a key that is already mapped to another tenant",
                field=source,
            )
        try:
            validate_tenant(tenant, field_name=source)
        except InvalidRequest as exc:
            raise ConfigError(f"{source}: entry #{i}: {exc.message}", field=source) from exc
        out[key] = tenant
    return out


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
