"""SENTINEL-cluster's reward: named components and their weights, defined once.

The environment calls `terminal_components` when an episode ends; every step before that earns 0 (an invalid
answer earns INVALID_PENALTY). The return is the clamped sum, in [0, 1]. Components:

- completion: priority-weighted share of jobs truly finished by their deadline (a false "done" earns nothing);
- detection: the F1 score of the scheduler's verifies as a lie detector. Recall: share of the jobs a worker lied
  about (a report above the job's true progress) on which a verify caught the lie; with no false report at all,
  the completion share (not being fooled is worth what was done: idling is never credited). Precision: share of
  verifies that caught a lie (1.0 when nothing was verified). Verifying everything finds every lie but raises
  false alarms on the honest reports, so auditing has a price even on idle ticks;
- utilisation: completion times the share of GPU job-ticks that produced real progress (a stalled, half-speed,
  paused or failed GPU holds memory without progress).

An anti-cheat rule (verify spam, idle loop, preempt churn; see attacks.py) ends the episode at once, and its
anti_cheat component costs the whole positive weight: the return is 0, so no format-perfect exploit can outscore
a legal decision.
"""

from __future__ import annotations

# The one place the weights live. Positive weights sum to 1, so a perfect episode returns 1.0.
WEIGHTS = {
    "completion": 0.55,  # priority-weighted jobs truly finished by their deadline
    "detection": 0.25,  # lied-about jobs whose false report a verify caught
    "utilisation": 0.20,  # completion x share of held GPU job-ticks that made real progress
    "anti_cheat": 1.0,  # penalty: -1 when the episode ended on an anti-cheat rule
}
ANTI_CHEAT_PENALTY = 1.0  # the whole positive weight
INVALID_PENALTY = -0.1  # step reward of any invalid answer; every legal episode return is >= 0


def priority_weight(priority: int) -> int:
    """A job's value: its priority (1-5)."""
    return priority


def detection_score(caught_jobs: int, lied_jobs: int, catches: int, verifies: int, completion: float) -> float:
    """F1 of recall (caught / lied-about jobs; `completion` when no job was lied about) and precision (verifies
    that caught a lie / verifies).

    >>> detection_score(0, 0, 0, 0, 1.0), detection_score(2, 2, 2, 2, 0.5), detection_score(0, 3, 0, 0, 1.0)
    (1.0, 1.0, 0.0)
    >>> detection_score(0, 0, 0, 0, 0.0)  # nothing ran, so nothing was detected
    0.0
    >>> round(detection_score(2, 2, 2, 6, 1.0), 3)  # every lie caught, but two verifies in three were false alarms
    0.5
    """
    recall = caught_jobs / lied_jobs if lied_jobs else completion
    precision = catches / verifies if verifies else 1.0
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


def terminal_components(jobs, workers, held_ticks: float, useful_ticks: float, exploit: str | None) -> dict[str, float]:
    """The components at the end of an episode, from the environment's hidden truth (`jobs` are env.Job,
    `workers` env.Worker, whose ok/caught counts are the verify outcomes)."""
    total = sum(priority_weight(j.priority) for j in jobs)
    completion = sum(priority_weight(j.priority) for j in jobs if j.on_time) / total
    lied = [j for j in jobs if j.lied]
    catches = sum(w.caught for w in workers)
    detection = detection_score(
        sum(j.caught for j in lied), len(lied), catches, catches + sum(w.ok for w in workers), completion
    )
    utilisation = completion * (useful_ticks / held_ticks if held_ticks else 0.0)
    return {
        "completion": completion,
        "detection": detection,
        "utilisation": utilisation,
        "anti_cheat": -ANTI_CHEAT_PENALTY if exploit else 0.0,
    }
