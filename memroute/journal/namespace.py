"""The memory namespace of a request: (tenant, user) as one store ``user_id``.

Encoding: ``f"{tenant}:{user}"``. It passes :func:`memroute.types.validate_user_id` unchanged
(``/`` is not allowed there, ``:`` is), and it is reversible because a tenant may not contain
``:`` -- the first ``:`` always ends the tenant, while the user part keeps the full user-id
alphabet (``alice:work`` under tenant ``acme`` is ``acme:alice:work``). Distinct (tenant, user)
pairs therefore never share a namespace, so one tenant's users cannot read another's memories.
"""

from __future__ import annotations

import re

from memroute.errors import InvalidRequest
from memroute.types import validate_user_id

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
