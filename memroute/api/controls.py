"""Per-request controls: what one request may change about routing and memory.

Sent as the body object ``memroute`` (the ``openai`` client's ``extra_body={"memroute": {...}}``)
or, for clients that cannot add body fields, as headers; a field in the body wins over its header:

=============  ==========================  ====================================================
field          header                      meaning
=============  ==========================  ====================================================
``store``      ``x-memroute-store``        false: answer with memory, remember nothing new
``use_memory`` ``x-memroute-use-memory``   false: no retrieval; answered (and stored) as usual
``tier``       ``x-memroute-tier``         pin a tier (its index or name): no cascade
``tau``        ``x-memroute-tau``          this request's confidence threshold, within
                                           ``api.tau_range``
=============  ==========================  ====================================================

Pinning by model name (``model: "memroute/<tier>"``) is the same as ``tier``. Every value is
checked here, with a 400 naming the field (``memroute.tau``), and echoed in the response's
``memroute.controls``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from memroute.errors import InvalidRequest

FIELDS = ("store", "use_memory", "tier", "tau")
HEADERS = {f: "x-memroute-" + f.replace("_", "-") for f in FIELDS}
MODEL_PREFIX = "memroute/"


@dataclass(frozen=True)
class Controls:
    store: bool = True
    use_memory: bool = True
    tier: int | None = None  # pinned tier index; None: the cascade
    tau: float | None = None  # None: the router's

    def echo(self) -> dict[str, Any]:
        return asdict(self)


def tier_model_names(tiers: Sequence[str]) -> list[str]:
    """The model names that pin a tier: ``memroute/<tier name>``."""
    return [MODEL_PREFIX + t for t in tiers]


def parse_controls(
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None,
    *,
    tiers: Sequence[str],
    tau_range: tuple[float, float],
    model_tier: int | None = None,
) -> Controls:
    """The request's controls from ``body["memroute"]`` and ``headers``; ``model_tier``: the tier
    its model name pins, if any."""
    raw = body.get("memroute")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidRequest("memroute must be an object of per-request controls", field="memroute")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise InvalidRequest(f"memroute.{unknown[0]} is not a control; available: "
                             f"{', '.join(FIELDS)}", field=f"memroute.{unknown[0]}")
    given: dict[str, tuple[Any, str]] = {}
    for name in FIELDS:
        if raw.get(name) is not None:
            given[name] = (raw[name], f"memroute.{name}")
        elif headers is not None and headers.get(HEADERS[name]) is not None:
            given[name] = (_from_header(headers[HEADERS[name]]), HEADERS[name])
    out: dict[str, Any] = {}
    for name in ("store", "use_memory"):
        if name in given:
            out[name] = _bool(*given[name])
    if "tau" in given:
        out["tau"] = _tau(*given["tau"], tau_range)
    tier = _tier(*given["tier"], tiers) if "tier" in given else None
    if model_tier is not None and tier is not None and tier != model_tier:
        raise InvalidRequest(f"memroute.tier pins tier {tier} but the model names tier "
                             f"{model_tier}; send one of them", field=given["tier"][1])
    out["tier"] = tier if tier is not None else model_tier
    return Controls(**out)


def _from_header(value: str) -> Any:
    """Header text as the JSON value it spells (true/false, numbers); else the text."""
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(low)
    except ValueError:
        pass
    try:
        return float(low)
    except ValueError:
        return value.strip()


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{field} must be true or false, got {value!r}"[:200], field=field)
    return value


def _tau(value: Any, field: str, bounds: tuple[float, float]) -> float:
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{field} must be a number in [{lo}, {hi}]", field=field)
    if (isinstance(value, float) and not math.isfinite(value)) or not lo <= value <= hi:
        raise InvalidRequest(f"{field} must be in [{lo}, {hi}] on this server, got {value}"[:200],
                             field=field)
    return float(value)


def _tier(value: Any, field: str, tiers: Sequence[str]) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(tiers):
        return value
    if isinstance(value, str) and value in tiers:
        return list(tiers).index(value)
    raise InvalidRequest(f"{field} must be a tier index 0..{len(tiers) - 1} or one of "
                         f"{', '.join(tiers)}; got {value!r}"[:300], field=field)
