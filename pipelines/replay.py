"""The HTTP replay at cluster scale: users sharded across Ray tasks, Serve replicas sampled.

One trace can then drive an autoscaled Serve app from many clients: each shard (a stable hash of
the user, so a user's requests stay in order within one task) replays its users with
:func:`memroute.eval.replay.http_target.replay_http` into its own checkpoint file, and the driver
merges them. While the shards run, a thread samples ``serve.status()`` every ``every_s`` seconds:
the RUNNING replicas of each deployment over time, for the report.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memroute.config.replay import ReplayConfig
from memroute.datasets.records import TraceRequest
from memroute.eval.replay.driver import Checkpoint
from memroute.eval.replay.outcome import TierPrice

REPLICAS_CSV = "replicas.csv"


def shard_of(req: TraceRequest, shards: int) -> int:
    digest = hashlib.sha256(f"{req.tenant}\x1f{req.user_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % shards


def shard_checkpoint(run_dir: Path, k: int) -> Path:
    return run_dir / f"rows.shard{k}.jsonl"


class ReplicaSampler:
    """``(seconds since start, deployment, running replicas)`` every ``every_s`` seconds."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.samples: list[tuple[float, str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-sampler", daemon=True)
        self._t0 = time.monotonic()

    def _run(self) -> None:
        from ray import serve

        while not self._stop.is_set():
            try:
                status = serve.status()
            except Exception:  # noqa: BLE001 - the controller may be busy; the next sample counts
                status = None
            if status is not None:
                now = round(time.monotonic() - self._t0, 2)
                for app in status.applications.values():
                    for name, dep in app.deployments.items():
                        running = sum(n for state, n in dep.replica_states.items()
                                      if str(getattr(state, "value", state)) == "RUNNING")
                        self.samples.append((now, name, running))
            self._stop.wait(self.every_s)

    def __enter__(self) -> ReplicaSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def wait_settled(self, timeout_s: float) -> bool:
        """Block until every deployment is back at its first sampled count (the scale-down after
        the load), at most ``timeout_s``; True when it is."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.settled():
                return True
            time.sleep(self.every_s)
        return self.settled()

    def settled(self) -> bool:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for _, d, n in list(self.samples):
            first.setdefault(d, n)
            last[d] = n
        return bool(last) and all(last[d] <= first[d] for d in last)

    def write_csv(self, path: Path) -> Path:
        lines = ["t_s,deployment,replicas"] + [f"{t},{d},{n}" for t, d, n in self.samples]
        path.write_text("\n".join(lines) + "\n")
        return path

    def peak(self, deployment_prefix: str) -> int:
        return max((n for _, d, n in self.samples if d.startswith(deployment_prefix)), default=0)


def replay_http_sharded(cfg: ReplayConfig, prices: Sequence[TierPrice], requests: Sequence[TraceRequest],
                        run_dir: Path, *, shards: int, sample_every_s: float = 1.0) -> tuple[Checkpoint, ReplicaSampler]:
    """Run ``shards`` Ray tasks against ``cfg.target`` (Ray must be up, joined to the cluster that
    serves it when the replicas are to be sampled); returns the merged rows and the samples."""
    import ray

    key = os.environ.get(cfg.api_key_env, "")
    task = ray.remote(num_cpus=0.25)(_replay_shard).options(
        runtime_env={"env_vars": {cfg.api_key_env: key}} if key else None)
    parts: list[list[TraceRequest]] = [[] for _ in range(shards)]
    for req in requests:
        parts[shard_of(req, shards)].append(req)
    with ReplicaSampler(sample_every_s) as sampler:
        refs = [task.remote(cfg, list(prices), part, str(shard_checkpoint(run_dir, k)), run_dir.name)
                for k, part in enumerate(parts) if part]
        ray.get(refs)
        if cfg.watch_after_s:
            sampler.wait_settled(cfg.watch_after_s)
    sampler.write_csv(run_dir / REPLICAS_CSV)
    merged = Checkpoint(run_dir / "rows.jsonl")
    have = {request_id for _, request_id in merged.done}
    for k in range(shards):
        path = shard_checkpoint(run_dir, k)
        if path.exists():
            merged.append([r for r in Checkpoint(path).iter_rows() if r["request_id"] not in have])
    return merged, sampler


def _replay_shard(cfg: ReplayConfig, prices: list[TierPrice], requests: list[TraceRequest],
                  checkpoint: str, run: str) -> int:
    from memroute.eval.replay.http_target import replay_http

    log = Checkpoint(Path(checkpoint))
    replay_http(cfg, prices, requests, log, run=run, progress=False)
    return len(log.done)


def replicas_table(samples: Sequence[tuple[float, str, int]]) -> list[dict[str, Any]]:
    """Per deployment: replicas at the start, the peak, and at the end of the replay."""
    out: dict[str, dict[str, Any]] = {}
    for t, d, n in samples:
        row = out.setdefault(d, {"deployment": d, "start": n, "peak": n, "end": n})
        row["peak"] = max(row["peak"], n)
        row["end"] = n
    return list(out.values())
