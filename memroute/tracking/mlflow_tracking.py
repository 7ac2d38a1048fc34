"""MLflow helpers: one run per job, nested runs per sweep trial.

The default store is a local SQLite file (MLflow 3's plain file store is in maintenance
mode) with an explicit artifact location, so nothing lands in a stray ./mlruns.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Iterator

from memroute.config import TrackingConfig

log = logging.getLogger(__name__)


def _resolve_uri(uri: str) -> str:
    """Make a relative ``sqlite:///x.db`` absolute and create its folder."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        path = Path(uri[len(prefix):]).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return prefix + str(path)
    return uri


def _is_local_store(uri: str) -> bool:
    return uri.startswith(("sqlite:", "file:", "/")) or "://" not in uri


@contextlib.contextmanager
def _first_use_lock(uri: str) -> Iterator[None]:
    """Serialize store creation and experiment lookup across processes for a SQLite store:
    parallel sweep trials would otherwise race to create the tables (and the experiment)."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        yield
        return
    import fcntl

    with open(uri[len(prefix):] + ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def experiment_id(cfg: TrackingConfig) -> str:
    """The id of ``cfg.experiment`` in ``cfg.tracking_uri``, created on first use."""
    from mlflow import MlflowClient

    uri = _resolve_uri(cfg.tracking_uri)
    with _first_use_lock(uri):
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(cfg.experiment)
        if exp is not None:
            return exp.experiment_id
        if not _is_local_store(uri):
            # A tracking server decides where artifacts live (e.g. S3 through the server);
            # a local path here would point at this machine's disk.
            return client.create_experiment(cfg.experiment)
        artifacts = Path(cfg.artifact_location).resolve()
        artifacts.mkdir(parents=True, exist_ok=True)
        return client.create_experiment(cfg.experiment, artifact_location=artifacts.as_uri())


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dataclasses/dicts -> ``{"router.tau": 0.5, ...}`` for ``log_params``."""
    if is_dataclass(obj) and not isinstance(obj, type):
        obj = asdict(obj)
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, (list, tuple)):
        out[prefix[:-1]] = json.dumps(obj)
    else:
        out[prefix[:-1]] = obj
    return out


class Tracker:
    """A thin wrapper so jobs do not care whether tracking is on."""

    def __init__(self, cfg: TrackingConfig) -> None:
        self.cfg = cfg
        self.run_id: str | None = None
        self._mlflow: Any = None

    @contextlib.contextmanager
    def run(self, name: str, *, nested: bool = False, tags: dict[str, str] | None = None) -> Iterator["Tracker"]:
        if not self.cfg.enabled:
            yield self
            return
        import mlflow

        self._mlflow = mlflow
        uri = _resolve_uri(self.cfg.tracking_uri)
        mlflow.set_tracking_uri(uri)
        exp_id = experiment_id(self.cfg)
        # A sweep trial runs in its own process (a Ray task): its parent is named by id, not by
        # an active run in this process.
        parent = self.cfg.parent_run_id
        with mlflow.start_run(
            experiment_id=exp_id, run_name=name, nested=nested, tags=tags, parent_run_id=parent
        ) as active:
            self.run_id = active.info.run_id
            yield self

    def log_params(self, params: dict[str, Any]) -> None:
        if self._mlflow:
            self._mlflow.log_params({k: str(v)[:500] for k, v in params.items()})

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if self._mlflow:
            clean = {k: float(v) for k, v in metrics.items() if v is not None}
            self._mlflow.log_metrics(clean, step=step)

    def log_artifact(self, path: str | Path) -> None:
        if self._mlflow:
            self._mlflow.log_artifact(str(path))

    def log_text(self, text: str, name: str) -> None:
        if self._mlflow:
            self._mlflow.log_text(text, name)
