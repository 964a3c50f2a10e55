"""SENTINEL-cluster: schedule jobs on a GPU cluster whose workers may report false progress.

Used by `python -m lib baselines`, the corpus, GRPO rewards and evaluation through `SPEC` (README.md here has
the rules). Every answer is one tick of the cluster clock: the chosen action is applied, then every running job
on a working GPU advances at its worker's true speed, each worker reports progress, GPUs fail or recover,
deadlines kill unfinished jobs and new jobs arrive. The observation shows only what the scheduler has earned:
reports, its own verify results and worker telemetry it asked for; never a worker's hidden behaviour.
"""

from __future__ import annotations

from typing import Any

from ..base import Candidate, Environment
from .render import render
from .reward import INVALID_PENALTY, WEIGHTS, terminal_components
from .scenario import generate
from .state import AUDIT_COOLDOWN, EPS, IDLE_LIMIT, LIE_TOLERANCE, Gpu, Job, Observation, Worker, WorkerView

QUEUE_SHOWN = 3  # queued jobs offered for allocation: the most urgent ones that can still meet their deadline
RUNNING_SHOWN = 3  # running jobs offered for verify/preempt: failed GPU, report ahead, doubtful worker, priority
CLAIMS_SHOWN = 3  # unverified "done" claims offered for verify
OVERREPORT = 0.4  # an overreporting worker adds this to the true progress it reports
CHURN_TICKS = 3  # preempting a job on a working GPU within this many ticks of allocating it is churn
TELEMETRY_WINDOW = 3  # ticks of throughput a worker's telemetry covers
ACTION_TEXT = {
    "alloc": "allocate {} to {}",
    "preempt": "preempt {}",
    "verify": "verify {}",
    "info": "request telemetry from {}",
    "wait": "wait one tick",
}
# What a wait does (the environment argument `waits`): `one_tick`, the clock moves one tick per answer; or
# `until_change`, after a wait the clock runs on, tick by tick, until the observation shows something other than
# the clock and the numbers that move with it (`decision_view`): a job arrives, finishes, is claimed or times
# out, a GPU fails or recovers, a flag or a LOCKED mark changes, the offered candidates change. The rule is the
# environment's, the same for every policy, so a model is asked only where the state it sees has changed.
WAITS = ("one_tick", "until_change")
WAIT_TEXT = {"one_tick": "wait one tick", "until_change": "wait until something changes"}


def decision_view(o: Observation) -> tuple:
    """What the observation shows besides the clock and the numbers that move with it (reported and expected
    progress, ticks left, how far off a deadline is): the job counts, each worker's record, free memory and failed
    GPUs, which jobs are shown with which flag and LOCKED mark, and the offered candidates. Two ticks with the same
    view offer the same decision."""

    def locked(last: int | None) -> bool:
        return last is not None and o.tick - last < AUDIT_COOLDOWN

    return (
        o.counts,
        o.hopeless,
        tuple((w.name, w.free, w.down, w.ok, w.caught, w.info, locked(w.info_tick)) for w in o.workers),
        tuple(tuple((j.name, j.flag, locked(j.audited)) for j in jobs) for jobs in (o.queue, o.running, o.claims)),
        tuple(sorted(c.id for c in o.candidates)),
        o.idle,
    )


class SentinelClusterEnv(Environment):
    name = "sentinel_cluster"
    invalid_penalty = INVALID_PENALTY
    weights = WEIGHTS
    renderer = staticmethod(render)

    def __init__(self, waits: str = "one_tick"):
        if waits not in WAITS:
            raise ValueError(f"sentinel_cluster: waits must be one of {list(WAITS)}, got {waits!r}")
        self.waits = waits

    # ---- the episode (the base class runs reset and step) ---------------------------------------
    def _begin(self, internal_seed: int) -> None:
        scenario = generate(internal_seed, novel=self.split == "holdout_novel")
        self.scenario = scenario
        self.horizon = scenario.horizon
        self.workers = [Worker(i, b) for i, b in enumerate(scenario.behaviours)]
        self.gpus = [Gpu(i, g, self.workers[g.worker]) for i, g in enumerate(scenario.gpus)]
        for gpu in self.gpus:
            gpu.worker.gpus.append(gpu)
        self.jobs = [Job(i, spec) for i, spec in enumerate(scenario.jobs)]
        self._failures: dict[int, list[tuple[Gpu, int]]] = {}  # tick -> (gpu, +1 a failure starts, -1 it ends)
        for f in scenario.failures:
            self._failures.setdefault(f.start, []).append((self.gpus[f.gpu], 1))
            self._failures.setdefault(f.start + f.duration, []).append((self.gpus[f.gpu], -1))
        self.tick = 0
        self.held_ticks = self.useful_ticks = 0.0
        self._idle = 0
        self._waited = False
        self.ticks_skipped = 0  # ticks the clock ran on after a wait, no answer asked (`waits: until_change`)
        self._events()

    def _after_step(self) -> str | None:
        """Every answer is one tick: the cluster moves on, then the episode ends at the horizon or when every
        job is closed. With `waits: until_change`, a wait's tick is followed by as many more as pass before the
        observation's `decision_view` differs from the one the wait answered (or the episode ends)."""
        self._advance()
        end = self._end_reason()
        if self.waits == "until_change" and self._waited:
            seen = decision_view(self._obs)
            while end is None and decision_view(self._observe()) == seen:
                self._advance()
                self.ticks_skipped += 1
                end = self._end_reason()
        return end

    def _on_invalid(self) -> None:
        self._waited = False  # an invalid answer's tick passes idly: one tick, whatever `waits` says

    def _end_reason(self) -> str | None:
        if self.tick >= self.horizon:
            return "horizon"
        return "all_closed" if all(j.status in ("confirmed", "timed_out") for j in self.jobs) else None

    def _score(self, exploit: str | None) -> dict[str, float]:
        return terminal_components(self.jobs, self.workers, self.held_ticks, self.useful_ticks, exploit)

    def _hidden(self) -> dict[str, Any]:
        """HIDDEN state: worker behaviours, true progress, who lied."""
        return {
            "tick": self.tick,
            "horizon": self.horizon,
            "behaviours": {w.name: w.behaviour for w in self.workers},
            "gpus": {
                g.name: {
                    "memory": g.memory,
                    "used": g.used,
                    "down": g.down,
                    "worker": g.worker.name,
                    "jobs": [j.name for j in g.jobs],
                }
                for g in self.gpus
            },
            "jobs": {
                j.name: {
                    "status": j.status,
                    "progress": round(j.progress, 4),
                    "reported": round(j.reported, 4),
                    "done_at": j.done_at,
                    "deadline": j.deadline,
                    "lied": j.lied,
                    "caught": j.caught,
                }
                for j in self.jobs
            },
        }

    # ---- hidden truth the oracle reads ------------------------------------------------------------
    def job(self, name: str) -> Job:
        """The job named `name` ("J3"), with its hidden truth."""
        return self.jobs[int(name[1:]) - 1]

    def gpu(self, name: str) -> Gpu:
        return self.gpus[int(name[1:]) - 1]

    def worker(self, name: str) -> Worker:
        """The worker named `name` ("W2"), with its hidden behaviour."""
        return self.workers[int(name[1:]) - 1]

    def speed(self, worker: Worker, job: Job) -> float:
        """True share of full speed at which `worker` advances `job` now (hidden)."""
        if worker.behaviour == "slow":
            return 0.5
        if worker.behaviour == "degrading" and worker.active >= self.scenario.degrade_onset:
            return 0.0
        return 1.0

    def lies_about(self, worker: Worker, job: Job) -> bool:
        """Whether `worker` would report more progress on `job` than it makes (hidden)."""
        b = worker.behaviour
        return (
            b in ("overreporter", "slow")
            or b == "degrading"
            and self.speed(worker, job) == 0.0
            or b == "adversarial"
            and job.priority >= self.scenario.adversary_priority
        )

    # ---- dynamics -------------------------------------------------------------------------------
    def _apply(self, candidate: Candidate, info: dict[str, Any]) -> tuple[str | None, str | None]:
        """Apply a legal action at the current tick. Returns (the anti-cheat rule it broke, None)."""
        return self._act(candidate), None

    def _act(self, candidate: Candidate) -> str | None:
        """The action's effect; returns the anti-cheat rule it broke, if any."""
        kind, args, t = candidate.kind, candidate.args, self.tick
        self._waited = kind == "wait"
        if kind == "wait":
            self._idle = self._idle + 1 if any(c.kind == "alloc" for c in self._obs.candidates) else 0
            return "idle_loop" if self._idle >= IDLE_LIMIT else None
        self._idle = 0
        if kind == "alloc":
            job, gpu = self.job(args[0]), self.gpu(args[1])
            job.status, job.gpu, job.alloc_tick, job.base, job.ran = "running", gpu, t, job.reported, 0
            gpu.jobs.append(job)
            gpu.used += job.memory
        elif kind == "preempt":
            job = self.job(args[0])
            if t - job.alloc_tick < CHURN_TICKS and not job.gpu.down:
                return "preempt_churn"
            self._release(job)
            job.status = "queued"
            loss = 1.0 / job.work  # a restart loses one tick of work
            job.progress, job.reported = max(0.0, job.progress - loss), max(0.0, job.reported - loss)
        elif kind == "verify":
            job = self.job(args[0])
            if job.last_audit is not None and t - job.last_audit < AUDIT_COOLDOWN:
                return "verify_spam"
            job.last_audit = t
            self._verify(job)
        elif kind == "info":
            worker = self.worker(args[0])
            if worker.last_info is not None and t - worker.last_info < AUDIT_COOLDOWN:
                return "verify_spam"
            work = sum(w for w, _ in worker.window)
            ticks = sum(n for _, n in worker.window)
            worker.info, worker.last_info = (round(100 * work / ticks) if ticks else -1), t
        return None

    def _verify(self, job: Job) -> None:
        """Reveal the job's true progress; a report above it is caught and charged to the reporting worker."""
        worker = job.gpu.worker if job.status == "running" else job.claimed_by
        lie = job.reported - job.progress > LIE_TOLERANCE
        if lie:
            worker.caught += 1
            job.caught = True
        else:
            worker.ok += 1
        job.reported = job.progress
        if job.status == "running":
            job.paused = True  # the audit checkpoints the job: it makes no progress this tick
            job.base, job.ran = job.progress, 0
        elif job.done_at is not None:
            job.status = "confirmed"
        else:  # a false "done": the job is back in the queue at its true progress (or dead, past its deadline)
            job.status = "queued" if self.tick < job.deadline else "timed_out"

    def _release(self, job: Job) -> None:
        gpu = job.gpu
        gpu.jobs.remove(job)
        gpu.used -= job.memory
        job.gpu = None

    def _advance(self) -> None:
        """One tick: jobs on working GPUs progress and are reported on, then GPU events, deadlines, arrivals."""
        t = self.tick
        for worker in self.workers:
            work, ticks = 0.0, 0
            for gpu in worker.gpus:
                if gpu.down:  # its jobs hold their memory and make no progress
                    self.held_ticks += len(gpu.jobs)
                    for job in gpu.jobs:
                        job.paused = False
                    continue
                for job in list(gpu.jobs):
                    self.held_ticks += 1
                    if job.paused:
                        job.paused = False
                        continue
                    speed = self.speed(worker, job)
                    lies = self.lies_about(worker, job)
                    work += speed
                    ticks += 1
                    self.useful_ticks += speed
                    job.progress = min(1.0, job.progress + speed / job.work)
                    job.ran += 1
                    if not lies:
                        job.reported = job.progress
                    elif worker.behaviour == "overreporter":
                        job.reported = min(1.0, job.progress + OVERREPORT)
                    elif worker.behaviour == "adversarial":
                        job.reported = min(1.0, job.base + 2 * job.ran / job.work)
                    else:  # slow, degrading: the full-speed report, whatever was done
                        job.reported = job.expected()
                    if job.reported - job.progress > LIE_TOLERANCE:
                        job.lied = True
                    if job.progress >= 1.0 - EPS:
                        job.progress = job.reported = 1.0
                        job.done_at = t + 1
                    if job.reported >= 1.0 - EPS:  # the worker says "done" and hands the GPU back
                        job.early = job.expected() < 1.0 - EPS
                        self._release(job)
                        job.status, job.claim_tick, job.claimed_by = "claimed", t + 1, worker
            if ticks:
                worker.active += 1
            worker.window.append((work, ticks))
            if len(worker.window) > TELEMETRY_WINDOW:
                worker.window.pop(0)
        self.tick = t + 1
        self._events()

    def _events(self) -> None:
        """At the start of the current tick: GPU failures and recoveries, deadlines, arrivals."""
        t = self.tick
        for gpu, change in self._failures.get(t, ()):
            gpu.failures += change
            gpu.down = gpu.failures > 0  # jobs on a failed GPU stay allocated and make no progress
        for job in self.jobs:
            if job.status == "pending" and job.arrival <= t:
                job.status = "queued"
            if t >= job.deadline and job.done_at is None and job.status in ("queued", "running"):
                if job.status == "running":
                    self._release(job)
                job.status = "timed_out"  # (an unverified false claim stays "claimed": nobody knows yet)

    # ---- observation ----------------------------------------------------------------------------

    def _observe(self) -> Observation:
        t = self.tick
        counts: dict[str, int] = {}
        queue, running, claims, hopeless = [], [], [], 0
        for job in self.jobs:
            status = job.status
            if status == "pending":
                continue
            counts[status] = counts.get(status, 0) + 1
            if status == "queued":
                left = job.left()
                if t + left > job.deadline:
                    hopeless += 1
                else:
                    queue.append((job.deadline - t - left, -job.priority, job.index, job))
            elif status == "running":
                running.append(job)
            elif status == "claimed":
                claims.append(job)
        doubtful = {w for w in self.workers if w.caught or (w.info is not None and 0 <= w.info < 100)}
        queue.sort()
        shown_queue = [item[-1] for item in queue[:QUEUE_SHOWN]]
        running.sort(
            key=lambda j: (
                not j.gpu.down,
                j.reported <= j.expected() + LIE_TOLERANCE,
                j.gpu.worker not in doubtful,
                -j.priority,
                j.deadline,
                j.index,
            )
        )
        claims.sort(key=lambda j: (not j.early, j.claimed_by not in doubtful, -j.priority, -j.claim_tick, j.index))
        workers = tuple(
            WorkerView(
                w.name,
                f"{w.gpus[0].name}-{w.gpus[-1].name}",
                tuple((g.name, g.memory - g.used) for g in w.gpus if not g.down and g.used < g.memory),
                tuple(g.name for g in w.gpus if g.down),
                w.ok,
                w.caught,
                w.info,
                w.last_info,
            )
            for w in self.workers
        )
        shown_running = tuple(j.view() for j in running[:RUNNING_SHOWN])
        shown_claims = tuple(j.view() for j in claims[:CLAIMS_SHOWN])
        return Observation(
            t,
            self.horizon,
            tuple(sorted(counts.items())),
            hopeless,
            workers,
            tuple(j.view() for j in shown_queue),
            shown_running,
            shown_claims,
            self._candidates(shown_queue, shown_running, shown_claims),
            self._idle,
            self.waits,
        )

    def _candidates(self, queue: list[Job], running, claims) -> tuple[Candidate, ...]:
        """Allocations of the shown queued jobs onto the best-fitting working GPU of each worker (never one
        they would not fit), verify/preempt for the shown running jobs, verify for the shown claims, telemetry
        per worker and wait. Ids name the action; the list order is shuffled per step from the seed."""
        raw: list[tuple[str, tuple[str, ...]]] = []
        for job in queue:
            for worker in self.workers:
                fits = [g for g in worker.gpus if not g.down and g.free >= job.memory]
                if fits:
                    gpu = min(fits, key=lambda g: (g.free, g.index))
                    raw.append((f"alloc:{job.name}:{gpu.name}", ("alloc", job.name, gpu.name)))
        for view in running:
            raw.append((f"verify:{view.name}", ("verify", view.name)))
            raw.append((f"preempt:{view.name}", ("preempt", view.name)))
        raw += [(f"verify:{view.name}", ("verify", view.name)) for view in claims]
        raw += [(f"info:{w.name}", ("info", w.name)) for w in self.workers]
        raw.append(("wait", ("wait",)))
        text = {**ACTION_TEXT, "wait": WAIT_TEXT[self.waits]}
        return tuple(Candidate(cid, key[0], key[1:], text[key[0]].format(*key[1:])) for cid, key in self._shuffled(raw))
