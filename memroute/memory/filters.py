"""Milvus filter expressions built as templates plus parameters, never by splicing values.

Every filter the store sends goes through this module. A builder returns ``(expr, params)``:
``expr`` holds ``{name}`` placeholders only and ``params`` the values, ready for pymilvus'
``filter=`` / ``filter_params=`` (Milvus >= 2.5 expression templates).

Milvus Lite 3.2.2 (and servers older than 2.5) ignore ``filter_params``: the parser fails on
``{`` ("unexpected character '{'"). The store probes for template support when it opens and
otherwise asks :func:`render` for a literal expression. ``render`` is the only place a value
reaches an expression string, and it accepts only integers and strings from a strict allow-list
(the user-id alphabet): a quote, backslash or control character can never get through, so the
rendered expression has exactly the structure of the template.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence

from memroute.errors import InvalidRequest
from memroute.types import validate_user_id

Filter = tuple[str, dict[str, object]]

# Placeholders look like {name}; anything else in a template is literal expression text.
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Strings that may be rendered as literals: the user-id alphabet, nothing that can end a literal.
_SAFE_STRING_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,256}$")
_MAX_LIST = 16384


def user_filter(user_id: object) -> Filter:
    """Rows of one user. Raises :class:`InvalidRequest` (field ``user_id``) on a bad id."""
    uid = validate_user_id(user_id)
    return "user_id == {user_id}", {"user_id": uid}


def users_filter(user_ids: Sequence[object]) -> Filter:
    """Rows of any of several users (e.g. a batch job); every id is validated."""
    if isinstance(user_ids, (str, bytes)) or not isinstance(user_ids, Sequence):
        raise InvalidRequest("user_ids must be a list of user ids", field="user_ids")
    if not user_ids:
        raise InvalidRequest("user_ids must not be empty", field="user_ids")
    uids = sorted({validate_user_id(u, field_name="user_ids") for u in user_ids})
    return "user_id in {user_ids}", {"user_ids": uids}


def ids_filter(user_id: object, ids: Sequence[int]) -> Filter:
    """Given primary keys, restricted to one user (the user clause keeps lookups isolated)."""
    uid = validate_user_id(user_id)
    clean = [_check_int(i, "ids") for i in ids]
    if not clean:
        raise InvalidRequest("ids must not be empty", field="ids")
    return "user_id == {user_id} and id in {ids}", {"user_id": uid, "ids": clean}


def session_time_filter(start: object, end: object) -> Filter:
    """Rows whose ``session_time`` lies in ``[start, end]`` (epoch seconds, both inclusive);
    combine it with a user filter by :func:`all_of`."""
    lo, hi = _check_int(start, "time_window"), _check_int(end, "time_window")
    if lo > hi:
        raise InvalidRequest(f"time_window starts after it ends ({lo} > {hi})", field="time_window")
    return "session_time >= {t_start} and session_time <= {t_end}", {"t_start": lo, "t_end": hi}


def user_time_filter(user_id: object, time_window: Sequence[object] | None) -> Filter:
    """One user's rows, within ``time_window`` = (start, end) when one is given."""
    flt = user_filter(user_id)
    if time_window is None:
        return flt
    if isinstance(time_window, (str, bytes)) or not isinstance(time_window, Sequence) or len(time_window) != 2:
        raise InvalidRequest("time_window must be a (start, end) pair of epoch seconds", field="time_window")
    return all_of(flt, session_time_filter(time_window[0], time_window[1]))


def all_of(*parts: Filter) -> Filter:
    """The conjunction of filters; their parameter names must not collide."""
    if not parts:
        raise InvalidRequest("all_of needs at least one filter", field="filter")
    params: dict[str, object] = {}
    for _, p in parts:
        clash = set(params) & set(p)
        if clash:
            raise InvalidRequest(f"filter parameters used twice: {sorted(clash)}", field=min(clash))
        params.update(p)
    if len(parts) == 1:
        return parts[0][0], params
    return " and ".join(f"({expr})" for expr, _ in parts), params


def render(expr: str, params: Mapping[str, object]) -> str:
    """Substitute ``params`` into ``expr`` as safe literals, for servers without templates.

    Every placeholder must have a parameter and every parameter must be used. Values are encoded
    by :func:`literal`, which refuses anything that could change the expression's structure.
    """
    used: set[str] = set()

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in params:
            raise InvalidRequest(f"filter parameter {name!r} is missing", field=name)
        used.add(name)
        return literal(params[name], field=name)

    # One pass over the template: a substituted value is never scanned again.
    out = _PLACEHOLDER_RE.sub(sub, expr)
    unused = set(params) - used
    if unused:
        names = sorted(unused)
        raise InvalidRequest(f"filter parameters not used: {names}", field=names[0])
    return out


def literal(value: object, *, field: str = "value") -> str:
    """Encode one value as a Milvus literal, or raise :class:`InvalidRequest` naming ``field``."""
    if isinstance(value, bool):  # bool is an int subclass; never meant as an id
        raise InvalidRequest(f"{field} must not be a boolean", field=field)
    if isinstance(value, numbers.Integral):
        return str(_check_int(value, field))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequest(f"{field} must be a finite number", field=field)
        return repr(value)
    if isinstance(value, str):
        if not _SAFE_STRING_RE.fullmatch(value):
            raise InvalidRequest(
                f"{field} {value[:40]!r} cannot be used in a filter: only letters, digits and "
                "_ . : @ - are allowed (1-256 characters)",
                field=field,
            )
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        if not value or len(value) > _MAX_LIST:
            raise InvalidRequest(f"{field} must hold 1-{_MAX_LIST} values", field=field)
        if any(isinstance(v, (list, tuple)) for v in value):
            raise InvalidRequest(f"{field} must not contain nested lists", field=field)
        return "[" + ", ".join(literal(v, field=field) for v in value) + "]"
    raise InvalidRequest(
        f"{field} has unsupported type {type(value).__name__} for a filter", field=field
    )


def _check_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidRequest(f"{field} must be an integer", field=field)
    number = int(value)  # numpy integers -> int, so str() is a plain decimal
    if not -(2**63) <= number < 2**63:
        raise InvalidRequest(f"{field} is out of the INT64 range", field=field)
    return number
