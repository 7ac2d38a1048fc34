"""Config schemas and the one seam where Hydra/OmegaConf objects become typed dataclasses."""

from __future__ import annotations

from typing import Any, TypeVar

from memroute.config.schema import (
    AssetsConfig,
    BenchmarkConfig,
    DatasetConfig,
    EmbedderConfig,
    EmbedStageConfig,
    IngestConfig,
    MemoryConfig,
    ModelConfig,
    PartsConfig,
    RayConfig,
    RetrievalConfig,
    RouterConfig,
    TrackingConfig,
    WriteStageConfig,
    check_parts,
)
from memroute.errors import ConfigError

T = TypeVar("T")

__all__ = [
    "AssetsConfig",
    "BenchmarkConfig",
    "DatasetConfig",
    "EmbedderConfig",
    "EmbedStageConfig",
    "IngestConfig",
    "MemoryConfig",
    "ModelConfig",
    "PartsConfig",
    "RayConfig",
    "RetrievalConfig",
    "RouterConfig",
    "TrackingConfig",
    "WriteStageConfig",
    "check_parts",
    "register_configs",
    "to_object",
]

# group name -> schema; YAML files in conf/<group>/ are validated against these.
GROUP_SCHEMAS: dict[str, type] = {
    "dataset": DatasetConfig,
    "embedder": EmbedderConfig,
    "memory": MemoryConfig,
    "retrieval": RetrievalConfig,
    "model": ModelConfig,
    "ray": RayConfig,
    "router": RouterConfig,
    "tracking": TrackingConfig,
}


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore (called by jobs, never at import time)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="benchmark_schema", node=BenchmarkConfig)
    cs.store(name="ingest_schema", node=IngestConfig)
    from memroute.config.retrieval_eval import RetrievalEvalConfig

    cs.store(name="retrieval_eval_schema", node=RetrievalEvalConfig)
    from memroute.config.serve import ServeConfig

    cs.store(name="serve_schema", node=ServeConfig)
    from memroute.config.rescore import RescoreConfig

    cs.store(name="rescore_schema", node=RescoreConfig)
    from memroute.config.cost_report import CostReportConfig

    cs.store(name="cost_report_schema", node=CostReportConfig)
    from memroute.config.make_trace import MakeTraceConfig

    cs.store(name="make_trace_schema", node=MakeTraceConfig)
    from memroute.config.replay import ReplayConfig

    cs.store(name="replay_schema", node=ReplayConfig)
    from memroute.config.calibrate import CalibrateConfig

    cs.store(name="calibrate_schema", node=CalibrateConfig)
    from memroute.config.workflow_depth import WorkflowDepthConfig

    cs.store(name="workflow_depth_schema", node=WorkflowDepthConfig)
    for group, schema in GROUP_SCHEMAS.items():
        cs.store(group=group, name=f"{group}_schema", node=schema)


def to_object(cfg: Any, schema: type[T]) -> T:
    """Validate ``cfg`` (DictConfig or dict) against ``schema`` and return a dataclass instance.

    Unknown keys and wrong types raise :class:`ConfigError` naming the field.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), cfg)
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ConfigError(f"bad config at {key}: {exc.msg if hasattr(exc, 'msg') else exc}", field=key) from None
    assert isinstance(obj, schema)
    return obj
