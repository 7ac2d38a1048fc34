"""Retrieval evaluation: Recall@k / NDCG / MRR per strategy and Matryoshka width.

    python -m jobs.retrieval_eval                          # LoCoMo conv-26, evidence dia_ids as gold
    python -m jobs.retrieval_eval dataset=longmemeval      # generated LongMemEval-format set (size small)
    python -m jobs.retrieval_eval dataset=longmemeval dataset.path=/data/longmemeval_s.json
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from memroute.config import register_configs, to_object
from memroute.config.retrieval_eval import RetrievalEvalConfig


@hydra.main(config_path="../conf", config_name="retrieval_eval", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    from memroute.eval.retrieval_run import run_retrieval_eval
    from memroute.logs import quiet_third_party_logs

    quiet_third_party_logs()
    run_retrieval_eval(to_object(dcfg, RetrievalEvalConfig))


if __name__ == "__main__":
    register_configs()
    main()
