"""The power statement (numlearn.reporting.power): hand-computed minimum detectable differences."""

from __future__ import annotations

import math

import pytest

from numlearn.reporting.power import detectable, statement


def test_bootstrap_side_by_hand():
    # p = 0.5, n = 100, 1 seed, a = 0.05, power 0.8, no seed spread: sqrt(2 x 0.25 / 100) = 0.070711;
    # (1.959964 + 0.841621) x 0.070711 = 0.198104
    d = detectable(0.5, 100, 1, 0.05)
    assert d.bootstrap == pytest.approx(0.198104, abs=1e-5) and math.isinf(d.t) and math.isinf(d.both)
    # 4 seeds halve the problem-level spread
    assert detectable(0.5, 100, 4, 0.05).bootstrap == pytest.approx(0.198104 / 2, abs=1e-5)


def test_paired_t_side_by_hand():
    # 5 seeds, seed SD 0.05: (t_{0.975,4} + t_{0.8,4}) x 0.05 / sqrt(5) = (2.776445 + 0.940965) x 0.022361
    d = detectable(0.17, 100, 5, 0.05, seed_sd=0.05)
    assert d.t == pytest.approx((2.776445 + 0.940965) * 0.05 / math.sqrt(5), abs=1e-5)
    # Holm's strictest step over 12 at 3 seeds: t_{1-0.05/24, 2} alone is about 15.4
    strict = detectable(0.17, 100, 3, 0.05 / 12, seed_sd=0.05)
    assert strict.t > 0.05 * 15 / math.sqrt(3) and strict.both == strict.t


def test_statement_and_bad_input():
    text = statement(0.17, 100, [3, 5], 12, [0, 5])
    assert "| 5 | 5 |" in text and "a = 0.05/12" in text and text.count("\n| ") == 5  # the header and 2 x 2 rows
    with pytest.raises(ValueError, match="need 0<=p<=1"):
        detectable(1.5, 100, 3, 0.05)
