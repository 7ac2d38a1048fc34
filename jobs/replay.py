"""Replay a trace through memroute and the baselines; report cost and quality over time.

    python -m jobs.replay trace=.memroute/traces/trace.jsonl            # in-process, all strategies
    python -m jobs.replay trace=... +experiment=replay_mock             # mock tiers, seconds
    python -m jobs.replay trace=... target=http://127.0.0.1:8000 strategies=[memroute]
    python -m jobs.replay trace=... warm_from=history.jsonl             # memory from recorded turns
    python -m jobs.replay trace=... shadow_share=0.1                    # samples for jobs.calibrate
    python -m jobs.replay run_id=<folder under output_dir>               # resume a killed run
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config.replay import ReplayConfig


@hydra.main(config_path="../conf", config_name="replay", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, ReplayConfig, run)


def run(cfg: ReplayConfig) -> int:
    from memroute.config.replay import check_replay_config
    from memroute.eval.replay.run import run_replay

    check_replay_config(cfg)
    if cfg.shards > 1:
        return sharded(cfg)
    if not cfg.warm_from or cfg.run_id:
        run_replay(cfg)
        return 0
    code, run_dir = warm_start(cfg)
    if code:
        return code
    run_replay(cfg, run_dir=run_dir)
    return 0


def sharded(cfg: ReplayConfig) -> int:
    """An http replay from ``cfg.shards`` Ray tasks (``ray.address`` joins the serving cluster,
    so the Serve replicas are sampled too)."""
    import time

    from jobs.ray_init import init_ray
    from memroute.eval.replay.run import run_replay
    from pipelines.replay import replay_http_sharded

    def runner(cfg, prices, requests, checkpoint, run_dir):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        merged, sampler = replay_http_sharded(cfg, prices, requests, run_dir, shards=cfg.shards)
        checkpoint.done = set(merged.done)  # the same file: the shards' rows merged into it
        return {"total_s": time.perf_counter() - started}

    started_ray = init_ray(cfg.ray)
    try:
        run_replay(cfg, http_runner=runner)
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    return 0


def warm_start(cfg: ReplayConfig):  # type: ignore[no-untyped-def]
    """Bulk-load ``warm_from`` into memroute's store of a new run folder (Ray Data ingest)."""
    from dataclasses import replace

    from jobs import ingest
    from memroute.config import DatasetConfig, IngestConfig, TrackingConfig
    from memroute.eval.replay.run import memory_uri
    from memroute.eval.report import new_run_dir

    run_dir = new_run_dir(cfg.output_dir)
    print(f"warm start: loading {cfg.warm_from} into memroute's memory", flush=True)
    ingest_cfg = IngestConfig(
        dataset=DatasetConfig(name="traces", path=cfg.warm_from), embedder=cfg.embedder,
        memory=replace(cfg.memory, uri=memory_uri(cfg, run_dir, "memroute")), assets=cfg.assets,
        tracking=TrackingConfig(enabled=False), work_dir=str(run_dir / "ingest"), progress=False,
    )
    return ingest.run(ingest_cfg), run_dir


if __name__ == "__main__":
    cli.main(main, "replay")
