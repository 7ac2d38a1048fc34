"""API keys -> tenants, and the memory namespace of a request: (tenant, user) -> store user id.

Why a tenant can never reach another tenant's memories, whatever ``user`` it sends:

1. The tenant comes only from the API key (:meth:`ApiKeys.authenticate`); nothing in the body
   can choose it. Tenant names are validated when the keys are loaded and cannot contain ``:``.
2. :func:`namespace` always returns ``f"{tenant}:{rest}"``. Since the tenant has no ``:``, the
   text before the first ``:`` of any namespace *is* its tenant, so ids of different tenants
   differ in that prefix and the store's exact ``user_id ==`` filter keeps them apart.
3. ``rest`` is the user verbatim when it is a plain user id (the ``validate_user_id`` alphabet)
   that fits; any other string (``/``, spaces, unicode, too long, or starting with the reserved
   ``sha256.`` prefix) becomes ``sha256.`` + base64url(SHA-256(user)). Verbatim parts never
   start with ``sha256.`` and hashed parts always do, so the two never meet; two different
   hashed users would need a SHA-256 collision. Hence distinct (tenant, user) pairs never share
   a namespace, and the result always passes :func:`memroute.types.validate_user_id`.

The verbatim form is exactly :func:`memroute.journal.namespaced_user_id`, so the journal, the
store and the API agree on ``acme:alice``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memroute.api.config import ApiConfig
from memroute.errors import ConfigError, InvalidRequest, Unauthorized
from memroute.journal.namespace import SEPARATOR, namespaced_user_id, validate_tenant
from memroute.types import USER_ID_RE, validate_user_id

HASH_PREFIX = "sha256."
_MAX_ID = 128  # validate_user_id's limit for the whole namespace


def namespace(tenant: str, user: str) -> str:
    """The store user id of ``user`` within ``tenant`` (see the module doc for the proof sketch)."""
    validate_tenant(tenant)
    if not isinstance(user, str) or not user:
        raise InvalidRequest("user must be a non-empty string", field="user")
    plain = (
        USER_ID_RE.fullmatch(user) is not None
        and not user.startswith(HASH_PREFIX)
        and len(tenant) + len(SEPARATOR) + len(user) <= _MAX_ID
    )
    if plain:
        return namespaced_user_id(tenant, user)
    digest = hashlib.sha256(user.encode("utf-8", "surrogatepass")).digest()
    # 43 characters of [A-Za-z0-9_-]
    token = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
    # tenant <= 64 + ':' + 7 + 43 = 115 <= 128, and every character is in the user-id alphabet.
    return validate_user_id(f"{tenant}{SEPARATOR}{HASH_PREFIX}{token}", field_name="user")


def split_namespace(user_id: str) -> tuple[str, str | None]:
    """``"acme:alice"`` -> ``("acme", "alice")``; a hashed user gives ``("acme", None)``."""
    validate_user_id(user_id)
    tenant, sep, rest = user_id.partition(SEPARATOR)
    if not sep or not rest:
        raise InvalidRequest(
            f"user_id {user_id[:40]!r} has no tenant part (expected tenant:user)", field="user_id"
        )
    validate_tenant(tenant, field_name="user_id")
    if rest.startswith(HASH_PREFIX):
        return tenant, None
    validate_user_id(rest, field_name="user_id")
    return tenant, rest


def tenant_of(user_id: str) -> str:
    """The tenant a namespace belongs to (what an authorization check compares)."""
    return split_namespace(user_id)[0]


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
