"""Benchmark plots: the tables behind them on hand-built predictions, and real PNG files."""

import random

import polars as pl
import pytest

from memroute.eval.plot_tables import (
    cause_counts,
    expected_calibration_error,
    f1_cost_table,
    pareto_front,
    reliability_table,
    small_share_table,
)
from memroute.eval.plots import (
    all_plots,
    causes_by_condition,
    f1_vs_cost,
    reliability_diagram,
    small_share_vs_tau,
)

from .prediction_frames import call, frame, row

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG and len(data) > 2000


def _single(cond, qid, model, conf, f1):
    return row(cond, qid, f1, [call(0, model, 100, 5, conf, True)])


@pytest.fixture
def compound_run():
    """cold_compound at tau 0.5 plus the two single-model conditions that ran the same prompts."""
    return [
        row("cold_compound", "q1", 1.0, [call(0, "small", 50, 2, 0.9, True)]),
        row("cold_compound", "q2", 0.5, [call(0, "small", 50, 2, 0.3, False), call(1, "large", 50, 2, 0.8, True)]),
        row("cold_compound", "q3", 0.0, [call(0, "small", 50, 2, 0.6, True)]),
        _single("cold_small", "q1", "small", 0.9, 1.0),
        _single("cold_small", "q2", "small", 0.3, 0.2),
        _single("cold_small", "q3", "small", 0.6, 0.0),
        _single("cold_large", "q1", "large", 0.7, 0.7),
        _single("cold_large", "q2", "large", 0.8, 0.4),  # differs from the run's own tier-1 answer (0.5)
        _single("cold_large", "q3", "large", 0.9, 1.0),
    ]


def test_reliability_bins_by_hand():
    rows = [
        _single("cold_small", "a", "small", 0.05, 1.0),
        _single("cold_small", "b", "small", 0.15, 0.0),
        _single("cold_small", "c", "small", 0.19, 1.0),
        _single("cold_small", "d", "small", 0.57, 0.6),
        _single("cold_small", "e", "small", 1.0, 0.4),
        # a rejected probe: its answer was discarded, the row's F1 is the large model's
        row("cold_compound", "f", 1.0, [call(0, "small", 10, 1, 0.15, False), call(1, "large", 10, 1, 0.35, True)]),
    ]
    t = reliability_table(frame(rows), bins=10)
    small = {r["bin"]: r for r in t.filter(pl.col("model") == "small").iter_rows(named=True)}
    assert sorted(small) == [0, 1, 5, 9]
    assert small[1]["n"] == 2 and small[1]["accuracy"] == 0.5  # the rejected 0.15 is not counted
    assert small[1]["mean_confidence"] == pytest.approx(0.17)
    assert (small[1]["lo"], small[1]["hi"]) == (0.1, 0.2)
    assert small[5]["accuracy"] == 1.0 and small[9]["accuracy"] == 0.0  # 1.0 lands in the last bin
    large = t.filter(pl.col("model") == "large")
    assert large["bin"].to_list() == [3] and large["accuracy"].to_list() == [1.0]
    # 0.57 * 100 is 56.999... in floating point; it still belongs to bin 57
    assert 57 in reliability_table(frame(rows), bins=100)["bin"].to_list()
    # a stricter threshold: 0.6 is no longer correct
    strict = reliability_table(frame(rows), bins=10, threshold=0.7).filter(pl.col("model") == "small")
    assert strict.filter(pl.col("bin") == 5)["accuracy"].item() == 0.0
    ece = expected_calibration_error(t)
    # small: (1*|1-0.05| + 2*|0.5-0.17| + 1*|1-0.57| + 1*|0-1|) / 5
    assert ece["small"] == pytest.approx((0.95 + 2 * 0.33 + 0.43 + 1.0) / 5)


def test_reliability_diagram_writes_png(tmp_path):
    rows = [_single("cold_small", str(i), "small", i / 20, float(i % 2)) for i in range(20)]
    rows += [_single("cold_large", str(i), "large", i / 20, 1.0) for i in range(20)]
    path = reliability_diagram(frame(rows), tmp_path / "sub" / "rel.png")
    assert path == tmp_path / "sub" / "rel.png" and _is_png(path)


def test_small_share_vs_tau_by_hand(compound_run):
    t = small_share_table(frame(compound_run), [0.0, 0.7, 0.95])
    assert t["condition"].unique().to_list() == ["cold_compound"]  # single-model conditions are not replayed
    by = {r["tau"]: r for r in t.iter_rows(named=True)}
    assert by[0.0]["share_small"] == 1.0 and by[0.0]["coverage"] == 1.0
    assert by[0.0]["f1"] == pytest.approx((1.0 + 0.2 + 0.0) / 3)  # q2's small answer from cold_small
    assert by[0.7]["share_small"] == pytest.approx(1 / 3)
    assert by[0.7]["f1"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)  # q2: the run's own large answer wins
    assert by[0.95]["f1"] == pytest.approx((0.7 + 0.5 + 1.0) / 3)


def test_small_share_without_the_larger_answer_is_partial(compound_run):
    only = frame([r for r in compound_run if r["condition"] == "cold_compound"])
    by = {r["tau"]: r for r in small_share_table(only, [0.5, 0.95]).iter_rows(named=True)}
    assert by[0.5]["coverage"] == 1.0 and by[0.5]["f1"] == pytest.approx(0.5)  # the run itself
    assert by[0.95]["share_small"] == 0.0  # the share stays exact
    assert by[0.95]["coverage"] == pytest.approx(1 / 3) and by[0.95]["f1"] is None
    assert by[0.95]["f1_known"] == pytest.approx(0.5)


def test_small_share_is_non_increasing_in_tau():
    rng = random.Random(3)
    rows = []
    for i in range(60):
        c0 = rng.random()
        calls = [call(0, "small", 10, 1, c0, c0 >= 0.5)]
        if c0 < 0.5:
            calls.append(call(1, "large", 10, 1, rng.random(), True))
        rows.append(row("warm_compound", str(i), rng.random(), calls))
    taus = [i / 40 for i in range(41)]
    share = small_share_table(frame(rows), taus)["share_small"].to_list()
    assert all(a >= b for a, b in zip(share, share[1:]))
    assert share[0] == 1.0 and share[-1] < share[0]


def test_small_share_plot_and_skip(compound_run, tmp_path):
    assert _is_png(small_share_vs_tau(frame(compound_run), tmp_path / "s.png"))
    singles = frame([r for r in compound_run if r["condition"] != "cold_compound"])
    assert small_share_vs_tau(singles, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_pareto_front_by_hand():
    costs = [1.0, 2.0, 3.0, 2.0, 5.0, 5.0]
    f1s = [0.2, 0.5, 0.4, 0.5, 0.9, 0.8]
    # (3, .4) is beaten by (2, .5); (5, .8) by (5, .9); the two equal (2, .5) do not beat each other
    assert pareto_front(costs, f1s) == [True, True, False, True, True, False]


def test_f1_cost_table_and_plot(tmp_path):
    rows = [
        row("cold_small", "1", 0.2, [call(0, "small", 80, 0, 0.9, True, params_b=1)]),  # cost 10
        row("cold_small", "2", 0.4, [call(0, "small", 80, 0, 0.9, True, params_b=1)]),
        row("cold_large", "1", 0.2, [call(0, "large", 800, 0, 0.9, True, params_b=1)]),  # cost 100
        row("cold_large", "2", 0.2, [call(0, "large", 800, 0, 0.9, True, params_b=1)]),
        row("warm_compound", "1", 0.9, [call(0, "small", 400, 0, 0.9, True, params_b=1)]),  # cost 50
        row("warm_compound", "2", 0.5, [call(0, "small", 400, 0, 0.9, True, params_b=1)]),
    ]
    t = f1_cost_table(frame(rows))
    assert t["condition"].to_list() == ["cold_small", "cold_large", "warm_compound"]  # run order
    assert t["cost"].to_list() == pytest.approx([10.0, 100.0, 50.0])
    assert t["f1"].to_list() == pytest.approx([0.3, 0.2, 0.7])
    assert t["on_front"].to_list() == [True, False, True]
    assert _is_png(f1_vs_cost(frame(rows), tmp_path / "p.png"))
    with pytest.raises(ValueError, match="no_such"):
        f1_cost_table(frame(rows), "no_such")


def test_causes_counted_and_skipped_without_column(compound_run, tmp_path):
    assert causes_by_condition(frame(compound_run), tmp_path / "c.png") is None
    rows = [dict(r) for r in compound_run]
    rows[2]["cause"] = "hedged"
    rows[5]["cause"] = "not_retrieved"
    rows[8]["cause"] = "hedged"
    counts = cause_counts(frame(rows, with_cause=True))
    assert counts.rows() == [("cold_compound", "hedged", 1), ("cold_small", "not_retrieved", 1),
                             ("cold_large", "hedged", 1)]
    assert _is_png(causes_by_condition(frame(rows, with_cause=True), tmp_path / "c.png"))


def test_all_plots_writes_every_applicable_file(compound_run, tmp_path):
    paths = all_plots(frame(compound_run), tmp_path)
    assert [p.name for p in paths] == ["reliability.png", "small_share_vs_tau.png", "f1_vs_cost.png",
                                       "f1_vs_cost_prod.png"]
    assert all(_is_png(p) for p in paths)
    rows = [dict(r, cause="other" if r["f1"] < 0.5 else None) for r in compound_run]
    assert (tmp_path / "x" / "causes.png") in all_plots(frame(rows, with_cause=True), tmp_path / "x")
