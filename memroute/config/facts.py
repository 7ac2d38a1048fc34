"""Fact store settings: the ``facts`` group (:mod:`memroute.memory.facts`).

``url`` picks the back end: ``sqlite:///<path>`` (the embedded default, a WAL file beside the
journal) or ``postgresql://user@host:port/db`` (production: one database shared by every
ingress replica; the store talks to it with psycopg 3, so ``postgresql+psycopg://`` is accepted
too). Nothing here imports SQLAlchemy or a driver: the URL is only classified.
"""

from __future__ import annotations

from dataclasses import dataclass

from memroute.errors import ConfigError

SQLITE_PREFIXES = ("sqlite:///", "sqlite+pysqlite:///")
POSTGRES_PREFIXES = ("postgresql://", "postgresql+psycopg://")


@dataclass
class FactsConfig:
    url: str = "sqlite:///.memroute/facts.sqlite3"  # sqlite:///<file> | postgresql://...
    ephemeral_ttl_s: float = 86400.0  # an ephemeral fact is hidden this long after valid_from
    lock_lease_s: float = 600.0  # SQLite: a per-user lock not released by then is taken over
    busy_timeout_s: float = 10.0  # SQLite: how long a write waits for the file's write lock
    pool_size: int = 5  # connections kept per store (and per process)
    recent_turns: int = 5  # turn-pairs session start returns with the facts
    # Users whose active facts a store keeps in memory between session starts (valid while the
    # user's version token in the database is unchanged: safe across replicas); 0 = off.
    cache_users: int = 10000
    # Served: the router injects the user's active facts before the retrieved turn-pairs.
    inject: bool = True


def _scheme(url: str) -> str:
    """The part before ``://`` only: an error message never echoes a password."""
    head, sep, _ = url.partition("://")
    return f"{head}://" if sep else repr(url[:12])


def facts_backend(url: object, *, field: str = "facts.url") -> str:
    """``"sqlite"`` or ``"postgresql"`` for a usable ``url``; else :class:`ConfigError`."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("url must be a non-empty string", field=field)
    if url.startswith(SQLITE_PREFIXES):
        path = url.split(":///", 1)[1].partition("?")[0]
        if not path or path == ":memory:" or path.startswith("file::memory:"):
            raise ConfigError(
                "url must name a SQLite file (sqlite:///path/facts.sqlite3); an in-memory "
                "database is private to one connection and cannot hold shared facts",
                field=field,
            )
        return "sqlite"
    if url.startswith(POSTGRES_PREFIXES):
        rest = url.split("://", 1)[1]
        if not rest.partition("/")[0].rpartition("@")[2]:
            raise ConfigError("url must name a host: postgresql://user@host:5432/db", field=field)
        return "postgresql"
    raise ConfigError(
        f"url must start with sqlite:/// (a file) or postgresql:// (psycopg 3), got "
        f"{_scheme(url)}",
        field=field,
    )


def check_facts_config(cfg: FactsConfig) -> FactsConfig:
    """Raise :class:`ConfigError` naming the bad ``facts.*`` field; return ``cfg``."""
    facts_backend(cfg.url)
    # (field, lowest, highest): a TTL or lease of 0 would hide or free everything at once
    for name, low, high in (("ephemeral_ttl_s", 1.0, 366 * 86400.0),
                            ("lock_lease_s", 1.0, 86400.0),
                            ("busy_timeout_s", 0.0, 600.0)):
        value = getattr(cfg, name)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not low <= value <= high:
            raise ConfigError(
                f"{name} must be a number of seconds in [{low:g}, {high:.0f}], got {value!r}",
                field=f"facts.{name}",
            )
    size = cfg.pool_size
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 100:
        raise ConfigError(f"pool_size must be an integer in [1, 100], got {size!r}",
                          field="facts.pool_size")
    if not isinstance(cfg.inject, bool):
        raise ConfigError(f"inject must be true or false, got {cfg.inject!r}", field="facts.inject")
    for name, high in (("cache_users", 10_000_000), ("recent_turns", 100)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise ConfigError(f"{name} must be an integer in [0, {high}], got {value!r}",
                              field=f"facts.{name}")
    return cfg


__all__ = ["FactsConfig", "check_facts_config", "facts_backend"]
