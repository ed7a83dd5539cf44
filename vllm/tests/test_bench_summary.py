"""The median's interval (orderstats.median_ci) and the per-pair lines of
tests/bench_overhead.py --procs (pure functions; the measurements are the
benchmark's)."""

from __future__ import annotations

import math
import random

import pytest

from bench_overhead import summarize
from orderstats import median_ci


def test_median_ci_order_statistics():
    # n = 16: ranks 16/2 -+ 1.96*4/2 = 4.08 .. 11.92 -> o[4], o[12].
    med, lo, hi = median_ci([float(x) for x in range(16, 0, -1)])
    assert (med, lo, hi) == (8.5, 5.0, 13.0)
    assert median_ci([3.0]) == (3.0, 3.0, 3.0)
    # Up to 7 values the interval is the whole sample; from 8 it is not.
    assert median_ci([float(x) for x in range(7)])[1:] == (0.0, 6.0)
    assert median_ci([float(x) for x in range(8)])[1:] == (1.0, 7.0)
    with pytest.raises(ValueError):
        median_ci([])


@pytest.mark.parametrize("n", [16, 18, 40])
def test_median_ci_covers_the_median(n):
    # Ground truth: the population median of a skewed distribution (an
    # exponential's is ln 2), 2,000 seeds. [o[lo], o[hi]] covers it when lo+1
    # to hi of the n values lie below it: a binomial(n, 1/2) probability,
    # 95.1% at n = 16, 98.1% at 18, 97.3% at 40; the rate seen must be within
    # 0.02 of it (4 standard errors).
    median = math.log(2)
    _, lo_rank, hi_rank = median_ci(list(range(n)))
    exact = sum(math.comb(n, k) for k in range(int(lo_rank) + 1, int(hi_rank) + 1)) / 2**n
    assert 0.95 <= exact < 0.99
    hits = 0
    for seed in range(2000):
        rng = random.Random(seed)
        _, lo, hi = median_ci([rng.expovariate(1.0) for _ in range(n)])
        hits += lo <= median <= hi
    assert abs(hits / 2000 - exact) < 0.02, (hits, exact)


def test_summarize_counts_each_pair():
    rows = [{"version": v, "running": r, "overhead_thread_us": x, "aa_thread_us": a, "overhead_wall_us": x + 1}
            for v, r, x, a in [("main", 1024, 4.0, 0.1), ("main", 1024, 6.0, -0.2), ("main", 1024, 4.5, 0.3),
                               ("0.18", 256, 3.0, 0.0)]]
    lines = summarize(rows)
    assert len(lines) == 2
    assert lines[0].startswith("vLLM 0.18, 256 running, 1 processes: engine-thread overhead median 3.00")
    assert "median 4.50 us/step" in lines[1] and "2 of 3 <= 5" in lines[1]
    assert "range 4.00-6.00" in lines[1] and "A/A median +0.10" in lines[1] and "wall overhead median 5.50" in lines[1]
