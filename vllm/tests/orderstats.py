"""The median of a sample and its distribution-free 95% interval, for the
benchmarks that summarize repeated measurements (tests/bench_overhead.py
--procs, gpu/steptimer/costs.py)."""

from __future__ import annotations

import math
import statistics


def median_ci(xs: list[float], z: float = 1.96) -> tuple[float, float, float]:
    """(median, low, high) of xs: the interval runs between the order
    statistics at 0-based indices floor(n/2 - z*sqrt(n)/2) and
    ceil(n/2 + z*sqrt(n)/2), clamped to the sample (the binomial(n, 1/2)
    bounds on how many values lie below the median; at n = 16 the indices
    4 and 12, covering 95.1%; up to 7 values, the whole range)."""
    if not xs:
        raise ValueError("median_ci: no values")
    o = sorted(xs)
    n = len(o)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return statistics.median(o), o[lo], o[hi]
