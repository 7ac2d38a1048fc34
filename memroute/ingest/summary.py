"""The counts a bulk ingest reports (one summary line, MLflow metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IngestSummary:
    dataset: str
    read: int  # pairs the dataset produced
    written: int  # rows upserted by this run
    skipped: int  # already stored by an earlier run
    duplicates: int  # repeated ids within the input
    errors: int  # rows the store refused
    users: int
    seconds: float  # whole ingest: plan, pipeline, flush
    pipeline_seconds: float = 0.0  # embed + write (actor start-up included)
    first_batch_seconds: float | None = None  # pipeline start -> first rows written
    error_messages: list[str] = field(default_factory=list)

    @property
    def processed(self) -> int:
        return self.written + self.errors

    @property
    def rows_per_s(self) -> float:
        """Embedded-and-written rows per second of pipeline time (0 when nothing was new)."""
        return self.processed / self.pipeline_seconds if self.pipeline_seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"ingest summary: dataset={self.dataset} read={self.read} written={self.written} "
            f"skipped={self.skipped} errors={self.errors} duplicates={self.duplicates} "
            f"users={self.users} seconds={self.seconds:.1f} rows/s={self.rows_per_s:.1f}"
        )

    def metrics(self) -> dict[str, float]:
        out = {
            "rows_read": self.read,
            "rows_written": self.written,
            "rows_skipped": self.skipped,
            "rows_duplicate": self.duplicates,
            "rows_error": self.errors,
            "users": self.users,
            "seconds": self.seconds,
            "pipeline_seconds": self.pipeline_seconds,
            "rows_per_s": self.rows_per_s,
        }
        if self.first_batch_seconds is not None:
            out["first_batch_seconds"] = self.first_batch_seconds
        return {k: float(v) for k, v in out.items()}
