"""SENTINEL-cluster's one prompt renderer: an observation becomes the chat messages a model sees.

SFT data, GRPO rollouts, evaluation and post-save inference all call `render`; `SentinelClusterEnv.render` is
it. It shows the jobs and GPUs that matter now and summarises the rest in counts, so the largest cluster still
fits a small model's context (README.md has the measured lengths).
"""

from __future__ import annotations

from ..base import candidate_lines
from .state import AUDIT_COOLDOWN, IDLE_LIMIT, JobView, Observation, WorkerView

SYSTEM_PROMPT = (
    "Schedule jobs on a GPU cluster; each answer takes one tick. Workers report progress and say when a job is "
    "done, but some reports are false: a false done loses the job unless you verify it. verify shows a job's "
    "true progress (pausing it a tick); info shows a worker's real throughput. Run urgent high-priority jobs on "
    "workers you trust, move jobs off failed GPUs, check doubtful reports. "
    'Answer with one JSON object: {"action": "<candidate>"}'
)
# the system prompt where a wait lets the clock run on until the observation changes (`waits: until_change`)
SYSTEM_PROMPT_UNTIL_CHANGE = SYSTEM_PROMPT.replace(
    "each answer takes one tick.", "each answer takes one tick, and wait lets the clock run until something changes."
)
FLAG_TEXT = {"down": " GPU DOWN", "ahead": " AHEAD", "early": " EARLY", "": ""}


def _locked(last: int | None, tick: int) -> str:
    """Said where asking again now would be spam, so the model reads it instead of doing arithmetic on ticks."""
    return " LOCKED" if last is not None and tick - last < AUDIT_COOLDOWN else ""


def _worker(w: WorkerView, tick: int) -> str:
    free = " ".join(f"{name}:{gb}" for name, gb in w.free) or "none"
    parts = [f"{w.name} {w.gpus}: free {free}"]
    if w.down:
        parts.append(f"down {' '.join(w.down)}")
    parts.append(f"checks {w.ok} ok {w.caught} false")
    if w.info is not None:
        parts.append(f"info {'no data' if w.info < 0 else f'{w.info}%'} t{w.info_tick}{_locked(w.info_tick, tick)}")
    return "; ".join(parts)


def _audited(j: JobView, tick: int) -> str:
    return "" if j.audited is None else f", verified t{j.audited}{_locked(j.audited, tick)}"


def _running(j: JobView, tick: int) -> str:
    return (
        f"- {j.name} p{j.priority} on {j.gpu} {j.worker} since t{j.tick}: reported {j.reported}% expected "
        f"{j.expected}%{FLAG_TEXT[j.flag]}, due {j.due}{_audited(j, tick)}"
    )


def render(observation: Observation, list_candidates: bool = True) -> list[dict[str, str]]:
    """The one prompt renderer: SFT data, GRPO rollouts, evaluation and post-save inference all call it."""
    o = observation
    counts = dict(o.counts)
    summary = ", ".join(
        f"{counts[s]} {s.replace('_', ' ')}"
        for s in ("confirmed", "claimed", "timed_out", "running", "queued")
        if counts.get(s)
    )
    late = f" ({o.hopeless} too late)" if o.hopeless else ""
    lines = [
        f"Tick {o.tick} of {o.horizon}. Jobs: {summary or 'none yet'}{late}.",
        "Workers:",
        *(_worker(w, o.tick) for w in o.workers),
    ]
    ready = counts.get("queued", 0) - o.hopeless
    if o.queue:
        lines.append(f"Queue ({len(o.queue)} most urgent of {ready}):")
        lines += [f"- {j.name} p{j.priority} {j.memory}GB {j.left} ticks left, due {j.due}" for j in o.queue]
    if o.running:
        lines.append(f"Running ({len(o.running)} of {counts.get('running', 0)}):")
        lines += [_running(j, o.tick) for j in o.running]
    if o.claims:
        lines.append(f"Unverified done ({len(o.claims)} of {counts.get('claimed', 0)}):")
        lines += [
            f"- {j.name} p{j.priority} by {j.worker} at t{j.tick}{FLAG_TEXT[j.flag]}{_audited(j, o.tick)}"
            for j in o.claims
        ]
    if o.idle:
        lines.append(
            f"Waited {o.idle} ticks in a row with allocations offered; wait {IDLE_LIMIT} in a row ends the episode."
        )
    lines += candidate_lines(o.candidates, list_candidates)
    system = SYSTEM_PROMPT_UNTIL_CHANGE if o.waits == "until_change" else SYSTEM_PROMPT
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]
