"""A tiny name -> object registry whose lookups list what is available on failure."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from memroute.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        self.register(name)(obj)

    def get(self, name: str, *, field: str | None = None) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(
                f"Unknown {self.kind} {name!r}. Available: {', '.join(self.names())}",
                field=field,
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items
