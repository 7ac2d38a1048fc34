"""Dataset config -> conversations. The built-in generator writes LoCoMo JSON, so one loader reads both."""

from __future__ import annotations

from pathlib import Path

from memroute.config import DatasetConfig
from memroute.errors import ConfigError
from memroute.eval.datasets.locomo import Conversation, load_locomo


def load_conversations(cfg: DatasetConfig, workdir: Path) -> list[Conversation]:
    if cfg.name == "synthetic":
        from memroute.eval.synthetic import generate, write_json

        path = workdir / f"synthetic_u{cfg.num_users}_s{cfg.sessions_per_user}_seed{cfg.seed}.json"
        write_json(generate(num_users=cfg.num_users, sessions_per_user=cfg.sessions_per_user, seed=cfg.seed), path)
        return load_locomo(path, categories=cfg.categories or None, limit=cfg.limit)
    if cfg.name == "locomo":
        if not cfg.path:
            raise ConfigError("dataset.path is required for LoCoMo (path to locomo10.json)", field="dataset.path")
        path = Path(cfg.path).expanduser()
        if not path.is_file():
            raise ConfigError(f"dataset.path {str(path)!r} does not exist", field="dataset.path")
        return load_locomo(
            path, sample_ids=cfg.sample_ids or ["conv-26"], categories=cfg.categories or None, limit=cfg.limit
        )
    raise ConfigError(f"Unknown dataset {cfg.name!r}. Available: locomo, synthetic", field="dataset.name")
