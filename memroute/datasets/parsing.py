"""Shared parsing helpers for dataset loaders: JSON reading and errors that name the place."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memroute.errors import MemrouteError


class DatasetError(MemrouteError):
    """A dataset file is missing or malformed; the message names the file, sample and field."""

    status = 400
    code = "dataset_error"


class Where:
    """Builds errors that name the file, the record (``sample 3 (conv-41)``) and the field."""

    label = "record"

    def __init__(self, path: Path, position: int, ident: str | None) -> None:
        self.prefix = f"{path}: {self.label} {position}" + (f" ({ident})" if ident else "")

    def error(self, field: str, problem: str) -> DatasetError:
        return DatasetError(f"{self.prefix}: {field}: {problem}", field=field)

    def get(self, obj: dict[str, Any], key: str, kind: type | tuple[type, ...], field: str) -> Any:
        if key not in obj or obj[key] is None:
            raise self.error(field, "missing")
        value = obj[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            kinds = (kind,) if isinstance(kind, type) else kind
            want = " or ".join(k.__name__ for k in kinds)
            raise self.error(field, f"expected {want}, got {type(value).__name__}")
        return value


def read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise DatasetError(f"{path}: dataset file not found", field="path") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            field="path",
        ) from None


def jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """``("<file>: line N", parsed object)`` per non-blank line; bad JSON names its line."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            origin = f"{path}: line {lineno}"
            try:
                yield origin, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{origin}: not valid JSON ({exc.msg})", field="line") from None
