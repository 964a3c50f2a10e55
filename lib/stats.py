"""Bootstrap confidence intervals, shared by baselines and evaluation; the log-ratio of two mixes."""

from __future__ import annotations

import math

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


def gap_closure(policy: dict, teacher: dict, oracle: dict, *, resamples: int = 2000, seed: int = 0) -> dict:
    """(policy - teacher) / (oracle - teacher) over the seeds all three share: the share of the teacher's gap to
    the oracle that the policy closes (1: as good as the oracle, 0: the teacher, < 0: worse), with a paired
    bootstrap CI that resamples seeds and takes the ratio of the resampled means.

    >>> gap_closure({0: 0.5, 1: 0.5}, {0: 0.0, 1: 0.0}, {0: 1.0, 1: 1.0})["mean"]
    0.5
    """
    seeds = sorted(set(policy) & set(teacher) & set(oracle))
    if not seeds:
        raise ValueError("gap_closure: no shared seeds")
    gain = np.array([policy[s] - teacher[s] for s in seeds])
    headroom = np.array([oracle[s] - teacher[s] for s in seeds])
    if headroom.mean() <= 0:
        raise ValueError("gap_closure: the oracle does not beat the teacher on these seeds")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(seeds), size=(resamples, len(seeds)))
    ratios = gain[index].mean(axis=1) / np.maximum(headroom[index].mean(axis=1), 1e-12)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    return {"mean": float(gain.mean() / headroom.mean()), "ci95": [float(lo), float(hi)], "n": len(seeds)}


def kind_log_weights(kind_mix: dict[str, dict[str, float]] | None) -> dict[str, float]:
    """log(trained share / corpus share) per kind of answer, from the SFT stage record's `kind_mix`
    (`sft.kind_balance`, lib/training/balance.py): the factor by which the resampling multiplied each kind's prior.
    No mix (an SFT trained without `sft.kind_balance`) is a ValueError: there is no resampling to undo.

    >>> mix = {"corpus": {"a": 0.9, "b": 0.1}, "trained": {"a": 0.6, "b": 0.4}}
    >>> {k: round(v, 3) for k, v in kind_log_weights(mix).items()}
    {'a': -0.405, 'b': 1.386}
    """
    if not kind_mix:
        raise ValueError(
            "the SFT stage record has no kind_mix: its SFT was not trained with sft.kind_balance, so there is no "
            "resampling to undo"
        )
    corpus, trained = kind_mix["corpus"], kind_mix["trained"]
    missing = sorted(k for k in corpus if not trained.get(k)) + sorted(k for k in trained if not corpus.get(k))
    if missing:
        raise ValueError(f"kind_mix has no share on both sides for {missing}: cannot weigh their resampling")
    return {k: math.log(trained[k] / corpus[k]) for k in corpus}
