"""What the evidence in an observation says about the slots: a posterior over which behaviour sits behind each.

Used by `EvidenceExpert` only. It reads `SlotEvidence` (exactly what the prompt shows) and the documented
behaviour families (README.md), never the environment: the five behaviours are always the same five, one per
slot, but which slot holds which is drawn per episode and must be inferred. The parameters a split may change
are not assumed: every pair of strong domains and every stakes band as the adversary's threshold is weighed.
"""

from __future__ import annotations

from functools import cache, lru_cache
from itertools import combinations, permutations

from .scenario import (
    ACCURATE_SLOW,
    ADVERSARY_HONEST,
    BANDS,
    BEHAVIOURS,
    COST,
    DEGRADE_FLOOR,
    DEGRADE_START,
    DEGRADE_STEP,
    DOMAIN_STRONG,
    DOMAIN_WEAK,
    DOMAINS,
    OVERCONFIDENT,
)

_PAIRS = tuple(combinations(range(len(DOMAINS)), 2))
_THRESHOLDS = tuple(range(1, len(BANDS)))  # the first band the adversary turns in
_PERMUTATIONS = tuple(permutations(range(len(BEHAVIOURS))))


def _binomial(p: float, right: int, calls: int) -> float:
    return p**right * (1.0 - p) ** (calls - right)


def _degrade(call: int) -> float:
    return max(DEGRADE_FLOOR, DEGRADE_START - DEGRADE_STEP * call)


@cache
def _degrading_rights(calls: int) -> tuple[float, ...]:
    """Distribution of the number of right answers in a degrading slot's first `calls` calls."""
    dist = [1.0]
    for call in range(calls):
        p = _degrade(call)
        dist = [
            (dist[k] if k < len(dist) else 0.0) * (1 - p) + (dist[k - 1] * p if k else 0.0)
            for k in range(len(dist) + 1)
        ]
    return tuple(dist)


def _fits(e) -> list[tuple[float, tuple[tuple[float, ...], ...]]]:
    """Per behaviour: (likelihood of this slot's evidence, reliability table [domain][band] for its next call)."""
    calls, right = e.calls, e.right
    fits = []
    for behaviour in BEHAVIOURS:
        if e.steps_per_call and e.steps_per_call != COST[behaviour]:
            fits.append((0.0, ()))
            continue
        if behaviour in ("accurate_slow", "overconfident_fast"):
            p = ACCURATE_SLOW if behaviour == "accurate_slow" else OVERCONFIDENT
            fits.append((_binomial(p, right, calls), ((p,) * len(BANDS),) * len(DOMAINS)))
        elif behaviour == "domain_bound":
            weights = [_pair_likelihood(pair, e.domains) for pair in _PAIRS]
            total = sum(weights)
            table = (
                tuple(
                    (
                        sum(w for w, pair in zip(weights, _PAIRS) if d in pair) / total * DOMAIN_STRONG
                        + sum(w for w, pair in zip(weights, _PAIRS) if d not in pair) / total * DOMAIN_WEAK,
                    )
                    * len(BANDS)
                    for d in range(len(DOMAINS))
                )
                if total
                else ()
            )
            fits.append((total / len(_PAIRS), table))
        elif behaviour == "adversarial":
            weights = [_threshold_likelihood(t, e.bands) for t in _THRESHOLDS]
            total = sum(weights)
            row = (
                tuple(
                    sum(w for w, t in zip(weights, _THRESHOLDS) if b < t) / total * ADVERSARY_HONEST
                    for b in range(len(BANDS))
                )
                if total
                else ()
            )
            fits.append((total / len(_THRESHOLDS), (row,) * len(DOMAINS)))
        else:
            recent = e.recent
            earlier = calls - len(recent)
            likelihood = _degrading_rights(earlier)[right - sum(recent)] if 0 <= right - sum(recent) <= earlier else 0.0
            for offset, outcome in enumerate(recent):
                p = _degrade(earlier + offset)
                likelihood *= p if outcome else 1 - p
            fits.append((likelihood, ((_degrade(calls),) * len(BANDS),) * len(DOMAINS)))
    return fits


def _pair_likelihood(pair: tuple[int, int], cells) -> float:
    result = 1.0
    for d, (right, calls) in enumerate(cells):
        result *= _binomial(DOMAIN_STRONG if d in pair else DOMAIN_WEAK, right, calls)
    return result


def _threshold_likelihood(threshold: int, cells) -> float:
    result = 1.0
    for b, (right, calls) in enumerate(cells):
        result *= _binomial(ADVERSARY_HONEST, right, calls) if b < threshold else float(right == 0)
    return result


@lru_cache(maxsize=200_000)
def _cached_fits(e) -> tuple:
    return tuple(_fits(e))


def slot_beliefs(slots, domain: str, band: str) -> tuple[list[float], list[float]]:
    """For every slot: the chance it answers a subtask of this domain and band right, and its expected steps per
    call, averaged over every assignment of behaviours to slots weighted by how well it explains the evidence."""
    fits = [_cached_fits(e) for e in slots]
    d, b = DOMAINS.index(domain), BANDS.index(band)
    n = len(BEHAVIOURS)
    marginal = [[0.0] * n for _ in slots]
    for perm in _PERMUTATIONS:
        weight = 1.0
        for s, f in enumerate(perm):
            weight *= fits[s][f][0]
            if not weight:
                break
        if weight:
            for s, f in enumerate(perm):
                marginal[s][f] += weight
    reliability, cost = [], []
    for s, row in enumerate(marginal):
        total = sum(row)
        reliability.append(sum(w * fits[s][f][1][d][b] for f, w in enumerate(row) if w) / total)
        cost.append(sum(w * COST[BEHAVIOURS[f]] for f, w in enumerate(row)) / total)
    return reliability, cost
