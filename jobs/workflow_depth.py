"""Injection growth with workflow depth (the Total Cost of Agency): agent workflows of depth
1..max_depth, each step routed through memroute, with and without memory and with full history.

    python -m jobs.workflow_depth +experiment=workflow_mock                  # mock tiers, MiniLM
    python -m jobs.workflow_depth +experiment=workflow_mock "workflow.sources=[seeded]"
    python -m jobs.workflow_depth dataset.path=/data/locomo10.json "top_k_sweep=[1,4,16]"
    python -m jobs.workflow_depth retrieval.top_k=8 retrieval.probe_token_budget=256
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config.workflow_depth import WorkflowDepthConfig


@hydra.main(config_path="../conf", config_name="workflow_depth", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, WorkflowDepthConfig, run)


def run(cfg: WorkflowDepthConfig) -> None:
    from memroute.eval.workflow.run import run_workflow_depth

    run_workflow_depth(cfg)


if __name__ == "__main__":
    cli.main(main, "workflow_depth")
