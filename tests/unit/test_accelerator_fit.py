"""The accelerator fit check (memroute/config/accelerator_fit.py): every GPU preset fits its
device by the arithmetic, the production pair is refused on 141 and 80 GB with the numbers, and
configs without the facts are left alone. No GPU, no Ray: composed configs only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memroute.config.accelerator_fit import (
    check_accelerator_fit,
    fit_report,
    kv_bytes_per_token,
    weights_bytes,
)
from memroute.config.compose import compose_serve_config
from memroute.config.serve import AcceleratorConfig, ServeConfig, check_serve_config, served_tiers
from memroute.errors import ConfigError

GPU_PRESETS = {"gpu": ("MI300X", 192), "gpu-h200": ("H200", 141), "gpu-a100-80g": ("A100-80G", 80)}


def _refusal(cfg: ServeConfig) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        check_serve_config(cfg)
    return e.value


@pytest.mark.parametrize("preset", sorted(GPU_PRESETS))
def test_every_gpu_preset_fits_its_device(preset):
    cfg = compose_serve_config(preset, [])
    assert (cfg.accelerator.name, cfg.accelerator.memory_gb) == GPU_PRESETS[preset]
    assert check_serve_config(cfg) is cfg
    report = fit_report(cfg.accelerator, served_tiers(cfg))
    assert [f.index for f in report] == [0, 1]  # both tiers carry their facts: both are checked
    assert all(f.fits and f.sequences >= 1 and f.need_gb <= f.budget_gb for f in report)
    assert sum(f.utilization for f in report) <= 0.95


def test_the_arithmetic_matches_the_published_configs_and_checkpoints():
    tiers = {t.model.name: t.model for t in served_tiers(compose_serve_config("gpu", []))}
    big, small = tiers["qwen3-235b-awq"], tiers["qwen3-8b"]
    assert kv_bytes_per_token(small) == 2 * 36 * 8 * 128 * 2  # 144 KiB
    assert kv_bytes_per_token(big) == 2 * 94 * 4 * 128 * 2  # 188 KiB
    assert weights_bytes(small) / 1e9 == pytest.approx(16.4)  # Qwen3-8B bf16 on disk
    assert weights_bytes(big) / 1e9 == pytest.approx(124, rel=0.02)  # the AWQ checkpoint on disk
    assert small.params_b == 8  # EffCost's P is unchanged: only the fit check reads weight_params_b


@pytest.mark.parametrize(
    "memory_gb, budget, field",
    [
        # 8B + 235B need 23.2 + 130.0 GB: more than 0.95 of either device, whatever the shares.
        (141, "110.0 GB", "accelerator.memory_gb"),
        (80, "62.4 GB", "accelerator.memory_gb"),
    ],
)
def test_the_production_pair_is_refused_on_smaller_devices(memory_gb, budget, field):
    err = _refusal(compose_serve_config("gpu", [f"accelerator.memory_gb={memory_gb}"]))
    assert err.field == field
    assert "cascade.1 (qwen3-235b-awq) needs 124.8 GB weights + 3.2 GB KV for 16384 tokens" in err.message
    assert f"0.78 of {memory_gb} GB MI300X is {budget}" in err.message
    assert "= 130.0 GB" in err.message


def test_a_share_too_small_for_one_sequence_names_that_share():
    err = _refusal(compose_serve_config("gpu", ["cascade.0.engine_args.gpu_memory_utilization=0.1"]))
    assert err.field == "cascade.0.engine_args.gpu_memory_utilization"
    assert "16.4 GB weights + 4.8 GB KV for 32768 tokens + 2.0 GB reserve = 23.2 GB" in err.message
    assert "0.1 of 192 GB MI300X is 19.2 GB" in err.message
    # A shorter context fits in the same share: vLLM needs one max_model_len sequence.
    check_serve_config(compose_serve_config(
        "gpu", ["cascade.0.engine_args.gpu_memory_utilization=0.1", "cascade.0.max_model_len=4096"]))


def test_co_hosted_shares_over_095_are_refused():
    cfg = compose_serve_config("gpu", ["cascade.0.engine_args.gpu_memory_utilization=0.2"])
    err = _refusal(cfg)
    assert err.field == "cascade.1.engine_args.gpu_memory_utilization"
    assert "0.2 + 0.78 = 0.98" in err.message


def test_more_gpus_than_the_node_has_are_refused():
    err = _refusal(compose_serve_config("gpu", ["deploy.1.num_gpus=1"]))
    assert err.field == "accelerator.count"
    assert "0.2 x 1 + 1 x 1 = 1.2 GPUs" in err.message
    check_serve_config(compose_serve_config("gpu", ["deploy.1.num_gpus=1", "accelerator.count=2"]))


def test_unknown_memory_is_not_checked():
    cfg = compose_serve_config("gpu", ["accelerator.memory_gb=0", "cascade.1.engine_args.gpu_memory_utilization=0.9"])
    assert check_serve_config(cfg) is cfg
    assert fit_report(cfg.accelerator, served_tiers(cfg)) == []
    # The default: presets without an accelerator section check nothing.
    assert ServeConfig().accelerator == AcceleratorConfig()
    for preset in ("cpu", "cpu-tiny", "external"):
        assert compose_serve_config(preset, []).accelerator.memory_gb == 0


def test_a_model_without_architecture_facts_is_not_checked():
    cfg = compose_serve_config("gpu", ["accelerator.memory_gb=141"])
    bare = {k: replace(m, num_layers=None, num_kv_heads=None, head_dim=None, weight_bits=None)
            for k, m in cfg.cascade.items()}
    cfg = replace(cfg, cascade=bare)
    assert check_serve_config(cfg) is cfg
    assert fit_report(cfg.accelerator, served_tiers(cfg)) == []
    # One model's facts left out: only the other is checked (and the 8B alone is refused on 141 GB).
    half = replace(cfg, cascade={"0": compose_serve_config("gpu", []).cascade["0"], "1": bare["1"]})
    assert "cascade.0 (qwen3-8b)" in _refusal(half).message


def test_tiers_off_the_accelerator_are_not_checked():
    tiers = served_tiers(compose_serve_config("cpu", []))
    check_accelerator_fit(AcceleratorConfig(name="tiny", memory_gb=1.0), tiers)
    assert fit_report(AcceleratorConfig(memory_gb=1.0), tiers) == []


@pytest.mark.parametrize(
    "accelerator, field",
    [(AcceleratorConfig(memory_gb=-1), "accelerator.memory_gb"), (AcceleratorConfig(memory_gb=80, count=0),
                                                                   "accelerator.count")],
)
def test_bad_accelerator_values_fail_naming_the_field(accelerator, field):
    tiers = served_tiers(compose_serve_config("gpu", []))
    with pytest.raises(ConfigError) as e:
        check_accelerator_fit(accelerator, tiers)
    assert e.value.field == field


def test_the_fit_table_has_a_row_per_checked_tier():
    from bench.fit_table import markdown_table

    table = markdown_table()
    rows = table.splitlines()[2:]
    assert len(rows) == 10  # three presets and the pair on 141 and 80 GB, two tiers each
    assert sum(r.endswith("| yes |") for r in rows) == 6
    assert "| 0.78 x 192 = 149.8 | 7 | yes |" in table
