from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from memroute.config import BenchmarkConfig, register_configs, to_object
from memroute.errors import ConfigError
from memroute.config.schema import ordered_cascade

CONF = str(Path(__file__).resolve().parents[2] / "conf")


@pytest.fixture
def composer():
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        yield lambda overrides=(): compose("benchmark", overrides=list(overrides))
    GlobalHydra.instance().clear()


def test_default_benchmark_config(composer):
    cfg = to_object(composer(), BenchmarkConfig)
    models = ordered_cascade(cfg.cascade)
    assert [m.name for m in models] == ["qwen2.5-0.5b", "qwen2.5-1.5b"]
    assert all(m.engine == "vllm" for m in models)
    assert models[1].price_as_params_b == 235
    assert cfg.retrieval.fusion == "weighted" and cfg.router.tau == 0.5 and cfg.router.l_min == -3.0
    assert cfg.retrieval.stem and cfg.retrieval.query_focus == 0.5 and cfg.retrieval.context_weight == 0.5
    assert cfg.dataset.name == "synthetic"


def test_tiny_experiment_and_overrides(composer):
    cfg = to_object(composer(["+experiment=tiny", "router.tau=0.7", "retrieval.fusion=weighted"]), BenchmarkConfig)
    models = ordered_cascade(cfg.cascade)
    assert [m.name for m in models] == ["smollm2-135m", "smollm2-135m-hf"]
    assert models[1].engine == "transformers" and not cfg.tracking.enabled
    assert cfg.router.tau == 0.7 and cfg.retrieval.fusion == "weighted"


def test_three_tier_cascade_by_config_only(composer):
    cfg = to_object(composer(["+model@cascade.2=qwen3-235b-awq"]), BenchmarkConfig)
    assert [m.name for m in ordered_cascade(cfg.cascade)][-1] == "qwen3-235b-awq"


@pytest.mark.parametrize("override", ["router.taus=0.5", "router.tau=high", "retrieval.top_k=[1]"])
def test_typos_and_wrong_types_fail_at_compose(composer, override):
    with pytest.raises(Exception) as e:
        to_object(composer([override]), BenchmarkConfig)
    assert "tau" in str(e.value) or "top_k" in str(e.value)


def test_to_object_names_the_field():
    with pytest.raises(ConfigError) as e:
        to_object({"router": {"tau": "high"}}, BenchmarkConfig)
    assert e.value.field and "tau" in e.value.field


def test_empty_or_bad_cascade_keys():
    with pytest.raises(ConfigError):
        ordered_cascade({})
    with pytest.raises(ConfigError):
        ordered_cascade({"small": object()})  # type: ignore[dict-item]
