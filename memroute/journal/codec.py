"""TurnPair <-> journal payload (JSON), with the checks that keep a payload writable later.

A pair is checked before it is journaled: once acknowledged it must be flushable, so
anything the store would refuse for its type is refused here, while the caller can still
answer 400. (Size limits of a particular store are not known here; the flusher parks a pair
the store refuses as failed instead of retrying it forever.)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from typing import Any

from memroute.errors import InvalidRequest
from memroute.types import TurnPair, validate_user_id

_FIELDS = tuple(f.name for f in fields(TurnPair))
_STR_FIELDS = ("session_id", "user_text", "assistant_text", "source_model")
_INT_FIELDS = ("turn_index", "session_time")
INT64 = 2**63


def check_pair(pair: object, *, index: int = 0) -> TurnPair:
    """``pair`` if it can be journaled, else :class:`InvalidRequest` naming the field."""
    if not isinstance(pair, TurnPair):
        raise InvalidRequest(
            f"pairs[{index}] must be a TurnPair, got {type(pair).__name__}", field="pairs"
        )
    validate_user_id(pair.user_id)
    for name in _STR_FIELDS:
        if not isinstance(getattr(pair, name), str):
            raise InvalidRequest(f"pairs[{index}].{name} must be a string", field=name)
    for name in _INT_FIELDS:
        value = getattr(pair, name)
        if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value < INT64:
            raise InvalidRequest(
                f"pairs[{index}].{name} must be an INT64 integer, got {value!r}", field=name
            )
    created = pair.created_at
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not math.isfinite(
        created
    ):
        raise InvalidRequest(
            f"pairs[{index}].created_at must be a finite number", field="created_at"
        )
    return pair


def encode_pair(pair: TurnPair) -> str:
    return json.dumps(asdict(pair), ensure_ascii=False, sort_keys=True, allow_nan=False)


def decode_pair(payload: str) -> TurnPair:
    """Inverse of :func:`encode_pair`; raises ``ValueError`` on a payload it did not write."""
    data: Any = json.loads(payload)
    if not isinstance(data, dict) or set(data) != set(_FIELDS):
        raise ValueError(f"payload fields {sorted(data) if isinstance(data, dict) else data!r}")
    return TurnPair(**data)


def same_content(a: TurnPair, b: TurnPair) -> bool:
    """Equal but for ``created_at``: a retried request re-records the same turn a moment later."""
    return all(getattr(a, n) == getattr(b, n) for n in _FIELDS if n != "created_at")
