"""Cost projection: monthly USD per strategy from measured tokens, checked by hand."""

from pathlib import Path

import polars as pl
import pytest

from memroute.accounting.projection import (
    DEFAULT_VOLUMES,
    project,
    projection_markdown,
    tokens_per_query,
)

from memroute.config.cost_report import PriceSheet, TierPrice

from .prediction_frames import call, frame, row


@pytest.fixture
def run():
    return frame([
        row("cold_large", "q1", 0.6, [call(0, "large", 100, 10, 0.9, True)]),
        row("cold_large", "q2", 0.8, [call(0, "large", 300, 30, 0.9, True)]),
        row("cold_small", "q1", 0.2, [call(0, "small", 100, 10, 0.9, True)]),
        row("cold_small", "q2", 0.4, [call(0, "small", 100, 10, 0.9, True)]),
        row("warm_compound", "q1", 1.0, [call(0, "small", 400, 5, 0.9, True)]),
        row("warm_compound", "q2", 0.5, [call(0, "small", 400, 5, 0.2, False), call(1, "large", 600, 20, 0.9, True)]),
        row("some_ablation", "q1", 0.0, [call(0, "small", 9999, 99, 0.9, True)]),  # no strategy: left out
    ])


def _get(table, strategy, memory, volume):
    return table.filter(
        (pl.col("strategy") == strategy) & (pl.col("memory") == memory) & (pl.col("volume") == volume)
    ).row(0, named=True)


def test_tokens_per_query_by_role(run):
    t = tokens_per_query(run)
    assert t.select("strategy", "memory").rows() == [("all_large", "cold"), ("all_small", "cold"), ("compound", "warm")]
    comp = t.filter(pl.col("strategy") == "compound").row(0, named=True)
    # the rejected probe is paid for: small 400 in / 5 out on both questions; large once in two
    assert (comp["small_in"], comp["small_out"], comp["large_in"], comp["large_out"]) == (400, 5, 300, 10)
    assert comp["share_small"] == 0.5 and comp["f1"] == 0.75
    large = t.filter(pl.col("strategy") == "all_large").row(0, named=True)
    assert (large["small_in"], large["large_in"], large["large_out"]) == (0, 200, 20)


def test_monthly_cost_by_hand_default_sheet(run):
    t = project(run)
    assert t.height == 3 * 2 and t["volume"].to_list()[:3] == ["personal"] * 3
    # all_large: (200 * 2.50 + 20 * 10.00) / 1e6 = 7.0e-4 USD per query
    assert _get(t, "all_large", "cold", "personal")["monthly_usd"] == pytest.approx(7e-4 * 7_000)
    assert _get(t, "all_large", "cold", "enterprise")["monthly_usd"] == pytest.approx(7e-4 * 3_000_000)
    # all_small: (100 * 0.15 + 10 * 0.60) / 1e6 = 2.1e-5
    assert _get(t, "all_small", "cold", "enterprise")["monthly_usd"] == pytest.approx(63.0)
    # compound: small (400 * 0.15 + 5 * 0.60) + large (300 * 2.50 + 10 * 10.00) = 913 / 1e6
    row_ = _get(t, "compound", "warm", "personal")
    assert row_["usd_per_query"] == pytest.approx(913e-6)
    assert row_["monthly_usd"] == pytest.approx(6.391)
    assert row_["f1"] == pytest.approx(0.75) and row_["queries_per_month"] == 7_000


def test_custom_sheet_volumes_and_warm_large(run):
    extra = frame([row("warm_large", "q1", 0.9, [call(0, "large", 1000, 0, 0.9, True)])])
    df = pl.concat([run, extra], how="vertical_relaxed")
    sheet = PriceSheet(small=TierPrice(1.0, 0.0), large=TierPrice(0.0, 1.0))  # in on small, out on large
    t = project(df, sheet, {"team": 1_000_000})
    assert set(t["volume"]) == {"team"}
    assert _get(t, "all_large", "warm", "team")["monthly_usd"] == 0.0  # 1000 in at 0 USD on large
    assert _get(t, "compound", "warm", "team")["monthly_usd"] == pytest.approx(400 + 10)
    md = projection_markdown(t, sheet)
    assert "| compound | warm | warm_compound |" in md and "team USD/month (1,000,000 q)" in md
    # compound warm is compared with warm all_large (0 USD): no percentage; cold small with cold large
    assert md.splitlines()[-1].endswith("|  |")


def test_markdown_compares_with_all_large(run):
    md = projection_markdown(project(run))
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    lines = {ln.split(" | ")[0].strip("| ") + "/" + ln.split(" | ")[1]: ln for ln in rows}
    assert lines["compound/warm"].endswith("| 130% |")  # 913e-6 / 7e-4, no warm_large: vs cold
    assert lines["all_small/cold"].endswith("| 3% |") and "| 0.1470 |" in lines["all_small/cold"]
    assert "| 6.39 |" in lines["compound/warm"]
    assert "| 4.90 |" in lines["all_large/cold"] and "| 2,100 |" in lines["all_large/cold"]


def test_errors_name_the_problem(run):
    with pytest.raises(ValueError, match="some_ablation"):
        project(run.filter(pl.col("condition") == "some_ablation"))
    with pytest.raises(ValueError, match="volumes.team"):
        project(run, volumes={"team": -1})
    with pytest.raises(ValueError, match="volumes is empty"):
        project(run, volumes={})


def test_job_config_defaults_match_the_issue():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from memroute.config import register_configs, to_object
    from memroute.config.cost_report import CostReportConfig

    register_configs()
    GlobalHydra.instance().clear()
    conf = str(Path(__file__).resolve().parents[2] / "conf")
    try:
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = to_object(compose("cost_report", overrides=["run_id=x"]), CostReportConfig)
            dropped = to_object(compose("cost_report", overrides=["~volumes.enterprise"]), CostReportConfig)
    finally:
        GlobalHydra.instance().clear()
    assert cfg.prices == PriceSheet() == PriceSheet(TierPrice(0.15, 0.60), TierPrice(2.50, 10.00))
    assert cfg.volumes == DEFAULT_VOLUMES == {"personal": 7_000, "enterprise": 3_000_000}
    assert cfg.run_id == "x" and cfg.run_dir is None
    assert dropped.volumes == {"personal": 7_000}
