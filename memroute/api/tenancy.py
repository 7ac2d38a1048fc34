"""API keys -> tenants. The key table is the only source of a request's tenant; the memory
namespace built from (tenant, user) is :mod:`memroute.namespace`."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memroute.config.api import ApiConfig
from memroute.errors import ConfigError, InvalidRequest, Unauthorized
from memroute.namespace import validate_tenant


@dataclass(frozen=True)
class _Entry:
    digest: bytes  # SHA-256 of the key: fixed-length, constant-time comparison
    tenant: str


class ApiKeys:
    """The key -> tenant table. Keys are held only as SHA-256 digests."""

    def __init__(self, keys: Mapping[str, str], *, anonymous_tenant: str | None = None) -> None:
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

    @classmethod
    def from_config(
        cls,
        keys: Mapping[str, str] | None = None,
        env_vars: Iterable[str] | str = (),
        *,
        environ: Mapping[str, str] | None = None,
        anonymous_tenant: str | None = None,
    ) -> ApiKeys:
        """Keys from config plus each env var (``"key1:tenantA,key2:tenantB"``)."""
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
        return cls(merged, anonymous_tenant=anonymous_tenant)

    @classmethod
    def from_api_config(
        cls, cfg: ApiConfig, *, environ: Mapping[str, str] | None = None
    ) -> ApiKeys:
        return cls.from_config(
            cfg.api_keys, cfg.api_keys_env, environ=environ, anonymous_tenant=cfg.anonymous_tenant
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
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized(
                "malformed Authorization header: expected 'Bearer <API key>'",
                field="authorization",
            )
        digest = _digest(token)
        found: str | None = None
        for entry in self._entries:  # no early exit: time does not depend on which key matched
            if hmac.compare_digest(entry.digest, digest):
                found = entry.tenant
        if found is None:
            raise Unauthorized("invalid API key", field="authorization")
        return found


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
