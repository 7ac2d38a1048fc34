"""The memory namespace of a request: (tenant, user) as one store ``user_id``.

Why a tenant can never reach another tenant's memories, whatever ``user`` it sends:

1. The tenant comes only from the API key (:meth:`memroute.api.tenancy.ApiKeys.authenticate`);
   nothing in the body can choose it. Tenant names are validated when the keys are loaded and
   cannot contain ``:``.
2. :func:`namespace` always returns ``f"{tenant}:{rest}"``. Since the tenant has no ``:``, the
   text before the first ``:`` of any namespace *is* its tenant, so ids of different tenants
   differ in that prefix and the store's exact ``user_id ==`` filter keeps them apart.
3. ``rest`` is the user verbatim when it is a plain user id (the ``validate_user_id`` alphabet)
   that fits; any other string (``/``, spaces, unicode, too long, or starting with the reserved
   ``sha256.`` prefix) becomes ``sha256.`` + base64url(SHA-256(user)). Verbatim parts never
   start with ``sha256.`` and hashed parts always do, so the two never meet; two different
   hashed users would need a SHA-256 collision. Hence distinct (tenant, user) pairs never share
   a namespace, and the result always passes :func:`memroute.types.validate_user_id`.

One module for the API, the journal and the store, so all agree on ``acme:alice``; it sits at
the bottom (types only) so any layer may use it.
"""

from __future__ import annotations

import base64
import hashlib
import re

from memroute.errors import InvalidRequest
from memroute.types import USER_ID_RE, validate_user_id

SEPARATOR = ":"
# A user id without ':' and at most 64 characters, leaving room for the user part.
TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def validate_tenant(tenant: object, *, field_name: str = "tenant") -> str:
    if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
        shown = tenant[:40] if isinstance(tenant, str) else type(tenant).__name__
        raise InvalidRequest(
            f"{field_name} {shown!r} is invalid: use 1-64 characters from letters, digits and "
            "_ . @ - (starting with a letter or digit; no ':')",
            field=field_name,
        )
    return tenant


def namespaced_user_id(tenant: str, user: str) -> str:
    """``("acme", "alice")`` -> ``"acme:alice"``; each part validated, the result too."""
    validate_tenant(tenant)
    validate_user_id(user, field_name="user")
    uid = f"{tenant}{SEPARATOR}{user}"
    if len(uid) > 128:  # validate_user_id's limit for the whole id
        raise InvalidRequest(
            f"tenant and user together are {len(uid) - 1} characters; at most 127 fit",
            field="user",
        )
    return validate_user_id(uid, field_name="user")


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
