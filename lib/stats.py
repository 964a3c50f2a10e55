"""Bootstrap confidence intervals, shared by baselines and evaluation."""
from __future__ import annotations

import numpy as np


def bootstrap_ci(values, *, resamples: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def paired_difference(a: dict, b: dict, **kwargs) -> dict:
    """Mean of a[seed] - b[seed] over the seeds both share, with its bootstrap CI."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("paired_difference: no shared seeds")
    diffs = [a[s] - b[s] for s in seeds]
    lo, hi = bootstrap_ci(diffs, **kwargs)
    return {"mean": float(np.mean(diffs)), "ci95": [lo, hi], "n": len(seeds)}
