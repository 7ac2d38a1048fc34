"""Journal settings (to be moved into memroute/config/schema.py with the serve config)."""

from __future__ import annotations

from dataclasses import dataclass

from memroute.errors import ConfigError


@dataclass
class JournalConfig:
    path: str = ".memroute/journal.sqlite3"  # SQLite file (WAL); one per serving process
    batch_size: int = 64  # turn-pairs per store write
    interval_s: float = 0.5  # after a wake-up, wait up to this long for a fuller batch
    max_backoff_s: float = 30.0  # longest wait between retries while the store fails


def check_journal_config(cfg: JournalConfig) -> JournalConfig:
    """Raise :class:`ConfigError` naming the bad ``journal.*`` field."""
    if not isinstance(cfg.path, str) or not cfg.path.strip():
        raise ConfigError("path must be a non-empty string", field="journal.path")
    size = cfg.batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(
            f"batch_size must be a positive integer, got {cfg.batch_size!r}",
            field="journal.batch_size",
        )
    for name in ("interval_s", "max_backoff_s"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 3600:
            raise ConfigError(
                f"{name} must be a number of seconds in [0, 3600), got {value!r}",
                field=f"journal.{name}",
            )
    return cfg
