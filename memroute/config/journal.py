"""Journal settings: the ``journal`` group of the serve config."""

from __future__ import annotations

from dataclasses import dataclass

from memroute.errors import ConfigError


@dataclass
class JournalConfig:
    path: str = ".memroute/journal.sqlite3"  # SQLite file (WAL); one per serving process
    # "" (the default): the SQLite file above. postgresql://...: one journal shared by every
    # ingress replica (memroute/journal/store.py, one schema for both dialects); flushers then claim batches with
    # a lease, so each entry is written by one of them, and a killed one's batch is taken over.
    url: str = ""
    lease_s: float = 60.0  # a claimed batch's lease (postgresql): longer than a store write
    batch_size: int = 64  # turn-pairs per store write
    interval_s: float = 0.5  # after a wake-up, wait up to this long for a fuller batch
    # Longest wait between retries while the store fails; the serving app also probes the store
    # every second meanwhile and retries as soon as it answers.
    max_backoff_s: float = 5.0
    # Idempotency-Key answers (in the journal's database, so shared by replicas): kept this long, counted from the first request
    idempotency_ttl_s: float = 86400.0
    idempotency_wait_s: float = 30.0  # a duplicate waits this long for the first request's answer
    # /readyz reports not ready above this many acknowledged pairs waiting for the store
    ready_max_pending: int = 10_000
    idempotency_lease_s: float = 600.0  # an unfinished claim older than this is taken over
    # On a Milvus server, reads are memory.read_consistency=Session: another replica's flushed
    # write shows after the server's next time tick (~200 ms), so read-your-writes keeps
    # reading an entry from the journal this long after its flush (0: not at all).
    visible_after_s: float = 2.0


def check_journal_config(cfg: JournalConfig) -> JournalConfig:
    """Raise :class:`ConfigError` naming the bad ``journal.*`` field."""
    if not isinstance(cfg.path, str) or not cfg.path.strip():
        raise ConfigError("path must be a non-empty string", field="journal.path")
    if not isinstance(cfg.url, str) or (cfg.url and not cfg.url.startswith(
            ("postgresql://", "postgresql+psycopg://"))):
        raise ConfigError(f"url must be empty (SQLite at journal.path) or postgresql://..., got "
                          f"{str(cfg.url)[:40]!r}", field="journal.url")
    lease = cfg.lease_s
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 1 <= lease <= 86400:
        raise ConfigError(f"lease_s must be a number of seconds in [1, 86400], got {lease!r}",
                          field="journal.lease_s")
    for name in ("batch_size", "ready_max_pending"):
        size = getattr(cfg, name)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"{name} must be a positive integer, got {size!r}",
                              field=f"journal.{name}")
    for name in ("interval_s", "max_backoff_s", "visible_after_s"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 3600:
            raise ConfigError(
                f"{name} must be a number of seconds in [0, 3600), got {value!r}",
                field=f"journal.{name}",
            )
    # (field, lowest, highest): a wait may be 0 (no waiting); a TTL or lease may not
    for name, low, high in (("idempotency_ttl_s", 1.0, 30 * 86400.0),
                            ("idempotency_wait_s", 0.0, 3600.0),
                            ("idempotency_lease_s", 1.0, 86400.0)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ConfigError(
                f"{name} must be a number of seconds in [{low:g}, {high:.0f}], got {value!r}",
                field=f"journal.{name}",
            )
    return cfg
