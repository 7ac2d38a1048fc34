"""Retrieval evaluation: Recall@k / NDCG / MRR per strategy and Matryoshka width.

    python -m jobs.retrieval_eval                          # LoCoMo conv-26, evidence dia_ids as gold
    python -m jobs.retrieval_eval dataset=longmemeval      # generated LongMemEval-format set (size small)
    python -m jobs.retrieval_eval dataset=longmemeval dataset.path=/data/longmemeval_s.json
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config.retrieval_eval import RetrievalEvalConfig


@hydra.main(config_path="../conf", config_name="retrieval_eval", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, RetrievalEvalConfig, run)


def run(cfg: RetrievalEvalConfig) -> None:
    from memroute.eval.retrieval_run import run_retrieval_eval

    run_retrieval_eval(cfg)


if __name__ == "__main__":
    cli.main(main, "retrieval_eval")
