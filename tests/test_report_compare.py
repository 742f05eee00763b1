"""Comparison logic: ratios, significance verdicts, warnings, best-per-metric."""
from __future__ import annotations

import random

import pytest

from sdbench.compare import card_table, compare_runs, cv, significance
from sdbench.records import Row, RunRecord, make_row


def row(samples_ms, label="r", nbytes=4096, **kw) -> Row:
    return make_row(label, "read", nbytes, [round(s * 1e6) for s in samples_ms], **kw)


def noisy(mean, n=30, sd=0.05, seed=1):
    rng = random.Random(seed)
    return [mean * (1 + rng.gauss(0, sd)) for _ in range(n)]


def test_clear_difference_is_significant_both_ways():
    a, b = row(noisy(1.0)), row(noisy(1.3, seed=2))
    s = significance(a, b)
    assert s.verdict == "slower" and s.welch_p < 1e-6 and s.mannwhitney_p < 1e-6
    assert significance(b, a).verdict == "faster"
    assert s.short().startswith("slower (p<0.001")


def test_same_distribution_is_not_significant():
    s = significance(row(noisy(1.0, seed=3)), row(noisy(1.0, seed=4)))
    assert s.verdict == "not significant" and s.welch_p > 0.05


def test_deterministic_samples():
    assert significance(row([2.0] * 5), row([2.0] * 5)).verdict == "same"
    s = significance(row([2.0] * 5), row([1.5] * 5))
    assert (s.verdict, s.note, s.welch_p) == ("faster", "no spread", None)


def test_rows_without_samples_have_no_verdict():
    bare = Row(label="r", op="read", bytes=4096, runs=10, samples_ms=(), time_ms=1.0, time_ms_median=None,
               time_ms_min=None, time_ms_max=None, time_ms_stdev=None, mib_s=3.9)  # type: ignore[arg-type]
    s = significance(row(noisy(1.0)), bare)
    assert s.verdict == "n/a" and "no per-call samples" in s.note and s.short() == "n/a"
    assert cv(bare) is None
    assert significance(row([1.0]), row([1.0, 1.1])).note == "fewer than 2 samples"


def test_compare_runs_ratio_missing_labels_and_warnings():
    base = RunRecord("a", {}, "wall", (row(noisy(2.0), "w"), row(noisy(1.0), "only-a")))
    other = RunRecord("b", {}, "virtual", (row([1.0] * 3, "w", 8192), row([3.0] * 3, "only-b")),
                      source="simulated", status="incomplete")
    cmp = compare_runs([("#1", base), ("#2", other)])
    assert [ln.label for ln in cmp.lines] == ["w", "only-a", "only-b"]
    w = cmp.lines[0].cells[1]
    assert w.speed_x == pytest.approx(base.rows[0].time_ms / 1.0)
    assert cmp.lines[1].cells[1].row is None and cmp.lines[2].cells[0].row is None
    text = "\n".join(cmp.warnings)
    assert "#2 is incomplete" in text and "simulated and measured runs are mixed" in text
    assert "fewer than 5 samples" in text and "different number of bytes" in text


def test_card_table_best_follows_the_unit():
    r1 = RunRecord("a", {}, "wall", (row([2.0, 2.1], "t"), Row(**{**row([1.0], "k").__dict__, "unit": "KB/s",
                                                                     "value": 900.0})))
    r2 = RunRecord("b", {}, "wall", (row([1.0, 1.1], "t"), Row(**{**row([1.0], "k").__dict__, "unit": "KB/s",
                                                                     "value": 1200.0})))
    t, k = card_table([r1, r2])
    assert (t.unit, t.best) == ("ms", 1) and (k.unit, k.values, k.best) == ("KB/s", (900.0, 1200.0), 1)
    [t2, _] = card_table([r1, r2], "mib_s")
    assert t2.unit == "MiB/s" and t2.best == 1


def test_a_zero_is_never_the_best():
    r1 = RunRecord("a", {}, "wall", (row([0.0, 0.0], "t"),))
    r2 = RunRecord("b", {}, "wall", (row([1.0, 1.2], "t"),))
    r3 = RunRecord("c", {}, "wall", (row([2.0, 2.2], "t"),))
    [t] = card_table([r1, r2, r3])
    assert t.values[0] == 0.0 and t.best == 1
    [only] = card_table([r1, RunRecord("d", {}, "wall", (row([0.0], "t"),))])
    assert only.best is None


def test_ranking_orders_runs_by_geometric_mean_speed_over_shared_rows():
    from sdbench.compare import ranking

    def rec(name, scale, odd_bytes=4096):
        return RunRecord(name, {}, "wall", (row(noisy(2.0 * scale, seed=1), "a"), row(noisy(8.0 * scale, seed=2), "b"),
                                            row(noisy(1.0, seed=3), "c", nbytes=odd_bytes)))
    cmp = compare_runs([("#1", rec("a", 1.0)), ("#2", rec("b", 0.5, odd_bytes=512)), ("#3", rec("c", 2.0))])
    ranks = ranking(cmp)
    assert [r.name for r in ranks] == ["#2", "#1", "#3"]
    fast = ranks[0]
    assert fast.rows == 2                        # row "c" moves different bytes in #2: left out
    assert fast.speed_x == pytest.approx(2.0, rel=0.05) and fast.faster == 2 and fast.slower == 0
    assert ranks[2].speed_x == pytest.approx(0.5, rel=0.05)
