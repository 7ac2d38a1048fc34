"""Reading the generators' word lists and templates (``data/<name>.json``, package data)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


def frozen(value: Any) -> Any:
    """JSON lists as tuples, all the way down (dicts keep their order)."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: frozen(v) for k, v in value.items()}
    return value


@cache
def load(name: str) -> dict[str, Any]:
    """``data/<name>.json`` with every list a tuple (read once)."""
    text = (resources.files(__package__) / "data" / f"{name}.json").read_text(encoding="utf-8")
    data = frozen(json.loads(text))
    data.pop("_doc", None)
    return data  # type: ignore[no-any-return]
