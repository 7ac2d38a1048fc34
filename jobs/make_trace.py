"""Write a seeded replay trace (docs/TRACES.md) and print what it holds.

    python -m jobs.make_trace                                   # 50 users, 2,000 requests
    python -m jobs.make_trace num_requests=100000 num_users=500 output=/tmp/t.parquet
    python -m jobs.make_trace mix.repeat=30 mix.paraphrase=40 mix.novel=30 general_share=0.4
"""

from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config.make_trace import MakeTraceConfig

PROGRESS_FROM = 20_000  # requests; smaller traces take a second or two


@hydra.main(config_path="../conf", config_name="make_trace", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, MakeTraceConfig, run)


def run(cfg: MakeTraceConfig) -> None:
    from memroute.datasets.generate.trace import TraceSummary, requests_per_user_capacity
    from memroute.datasets.generate.trace_sources import generate_trace
    from memroute.datasets.replay_trace import write_trace

    cfg.validate()
    if cfg.source == "synthetic":
        per_user = cfg.num_requests / cfg.num_users
        if per_user > (limit := requests_per_user_capacity(cfg)) / 3:
            print(f"note: {per_user:.0f} requests per user: the heavier users run out of facts "
                  f"(~{limit} requests each at this mix) and their novel questions turn general; "
                  f"use num_users >= {3 * cfg.num_requests // limit + 1} to keep the mix",
                  file=sys.stderr, flush=True)
    started = time.perf_counter()
    summary = TraceSummary()
    stream = (summary.add(r) for r in generate_trace(cfg))
    if cfg.progress and cfg.num_requests >= PROGRESS_FROM:
        from tqdm import tqdm

        stream = tqdm(stream, total=cfg.num_requests, unit="req", mininterval=1.0)
    path = cfg.output_path()
    write_trace(stream, path)
    print(f"trace: {summary.line()} -> {path} in {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    cli.main(main, "make_trace")
