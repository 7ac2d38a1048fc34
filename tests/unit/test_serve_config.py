"""The serve presets compose into valid typed configs, and impossible ones fail naming the field
(no Ray, no models: ``check_serve_config`` runs before anything starts)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from memroute.config.compose import compose_serve_config
from memroute.config.serve import (
    ServeConfig,
    check_serve_config,
    served_tiers,
    with_absolute_paths,
)
from memroute.errors import ConfigError
from memroute.config.schema import is_server_uri

PRESETS = ["cpu", "cpu-tiny", "gpu", "external"]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_is_a_valid_two_tier_config(preset):
    cfg = compose_serve_config(preset, [])
    assert isinstance(cfg, ServeConfig)
    assert check_serve_config(cfg) is cfg
    tiers = served_tiers(cfg)
    assert len(tiers) == 2
    assert tiers[0].model.name != tiers[1].model.name
    assert cfg.http.host == "127.0.0.1" and not cfg.http.allow_public_bind
    assert cfg.api.models == ["memroute"]
    # Milvus Lite is one file for one process: its presets keep a single ingress replica.
    if not is_server_uri(cfg.memory.uri):
        assert cfg.ingress.autoscaling.max_replicas == 1


def test_cpu_tiny_uses_the_smollm2_pair():
    tiers = served_tiers(compose_serve_config("cpu-tiny", []))
    assert [(t.model.name, t.model.engine) for t in tiers] == [
        ("smollm2-135m", "vllm"),
        ("smollm2-135m-hf", "transformers"),
    ]
    assert all(t.deploy.num_gpus == 0 for t in tiers)


def test_gpu_preset_fits_both_engines_on_one_device():
    cfg = compose_serve_config("gpu", [])
    tiers = served_tiers(cfg)
    assert [t.model.name for t in tiers] == ["qwen3-8b", "qwen3-235b-awq"]
    assert sum(t.deploy.num_gpus for t in tiers) <= 1.0
    assert all(t.deploy.num_gpus > 0 for t in tiers)
    assert sum(t.model.engine_args["gpu_memory_utilization"] for t in tiers) <= 0.95
    assert [t.model.max_model_len for t in tiers] == [32768, 16384]
    # The confidence probe reads logprobs, so every engine must return them.
    assert all(t.model.engine_args.get("max_logprobs", 0) >= 2 for t in tiers)
    # A Milvus server lets the stateless router scale out.
    assert is_server_uri(cfg.memory.uri) and cfg.ingress.autoscaling.max_replicas > 1


def test_external_preset_reads_tier_urls_from_the_environment(monkeypatch):
    monkeypatch.setenv("MEMROUTE_SMALL_URL", "http://127.0.0.1:9001/v1")
    monkeypatch.setenv("MEMROUTE_LARGE_URL", "http://127.0.0.1:9002/v1")
    tiers = served_tiers(compose_serve_config("external", []))
    urls = ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"]
    assert [t.model.base_url for t in tiers] == urls
    assert [t.model.params_b for t in tiers] == [8, 235]


def test_overrides_reach_the_typed_config():
    cfg = compose_serve_config(
        "cpu-tiny", ["http.port=8123", "router.tau=0.7", "api.limits.max_input_chars=2000"]
    )
    assert cfg.http.port == 8123 and cfg.router.tau == 0.7
    assert cfg.api.limits.max_input_chars == 2000


def _field_of(cfg: ServeConfig) -> str | None:
    with pytest.raises(ConfigError) as e:
        check_serve_config(cfg)
    return e.value.field


def test_milvus_lite_refuses_several_ingress_replicas():
    cfg = compose_serve_config("cpu-tiny", ["ingress.autoscaling.max_replicas=3"])
    assert _field_of(cfg) == "ingress.autoscaling.max_replicas"
    # The same replicas are fine with a Milvus server.
    check_serve_config(replace(cfg, memory=replace(cfg.memory, uri="http://127.0.0.1:19530")))


def test_non_loopback_host_needs_an_explicit_opt_in():
    cfg = compose_serve_config("cpu-tiny", ["http.host=0.0.0.0"])
    assert _field_of(cfg) == "http.host"
    check_serve_config(replace(cfg, http=replace(cfg.http, allow_public_bind=True)))


def test_empty_or_mis_keyed_cascade_fails_naming_cascade():
    cfg = compose_serve_config("cpu-tiny", [])
    assert _field_of(replace(cfg, cascade={}, deploy={})) == "cascade"
    gapped = {"0": cfg.cascade["0"], "2": cfg.cascade["1"]}
    assert _field_of(replace(cfg, cascade=gapped, deploy={})) == "cascade"
    assert _field_of(replace(cfg, cascade={"a": cfg.cascade["0"]}, deploy={})) == "cascade"
    # deploy settings for a slot the cascade does not have
    assert _field_of(replace(cfg, cascade={"0": cfg.cascade["0"]})) == "deploy.1"


@pytest.mark.parametrize(
    "override, field",
    [
        ("http.port=0", "http.port"),
        ("deploy.0.max_batch_size=0", "deploy.0.max_batch_size"),
        ("deploy.1.autoscaling.max_replicas=0", "deploy.1.autoscaling.max_replicas"),
        ("ingress.max_batch_size=0", "ingress.max_batch_size"),
        ("ingress.tier_timeout_s=0", "ingress.tier_timeout_s"),
        ("api.limits.max_input_chars=0", "api.limits.max_input_chars"),
        ("journal.batch_size=0", "journal.batch_size"),
    ],
)
def test_bad_values_fail_naming_the_field(override, field):
    assert _field_of(compose_serve_config("cpu-tiny", [override])) == field


def test_relative_paths_become_absolute_but_server_uris_stay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = with_absolute_paths(compose_serve_config("cpu-tiny", []))
    assert Path(cfg.journal.path) == tmp_path / ".memroute/serve/journal.sqlite3"
    assert Path(cfg.memory.uri) == tmp_path / ".memroute/serve/milvus.db"
    gpu = with_absolute_paths(compose_serve_config("gpu", []))
    assert gpu.memory.uri == "http://127.0.0.1:19530"


def test_presets_module_builds_applications_for_serve_build():
    import serve.presets as presets
    from ray.serve import Application

    assert isinstance(presets.cpu_tiny, Application)  # what `serve build serve.presets:cpu_tiny` imports
    with pytest.raises(AttributeError, match="available"):
        presets.nonexistent  # noqa: B018


def test_the_extraction_tier_must_be_a_tier_of_the_cascade():
    cfg = compose_serve_config("cpu-tiny", ["extraction.tier=1"])
    assert check_serve_config(cfg).extraction.tier == 1  # the larger model extracts
    with pytest.raises(ConfigError) as err:
        check_serve_config(compose_serve_config("cpu-tiny", ["extraction.tier=2"]))
    assert err.value.field == "extraction.tier"


def test_hot_vectors_with_several_replicas_need_the_shared_journal():
    cfg = compose_serve_config("cpu-tiny", ["ingress.autoscaling.max_replicas=2",
                                            "memory.uri=http://127.0.0.1:19530",
                                            "retrieval.hot_vectors=true"])
    assert _field_of(cfg) == "retrieval.hot_vectors"  # per-replica SQLite journals
    check_serve_config(replace(cfg, retrieval=replace(cfg.retrieval, hot_vectors=False)))
    shared = replace(cfg, journal=replace(cfg.journal, url="postgresql://u@127.0.0.1:5432/j"))
    assert check_serve_config(shared).retrieval.hot_vectors
