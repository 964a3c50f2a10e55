"""SENTINEL-cluster's state: jobs, GPUs and workers (hidden truth next to what is public), and the views the
observation is made of. Used by the environment (env.py), its renderer and its policies."""

from __future__ import annotations

import math
from typing import NamedTuple

from ..base import Candidate

EPS = 1e-9
LIE_TOLERANCE = 0.05  # a report this far above the truth is a lie (and a verify catches it)
IDLE_LIMIT = 4  # this many waits in a row while an allocation was offered is an idle loop
AUDIT_COOLDOWN = 3  # verifying a job, or asking a worker for telemetry, again within this many ticks is spam


class Job:
    """One job. `status` is public (queued, running, claimed, confirmed, timed_out; pending before arrival);
    `progress`, `done_at`, `lied` and `on_time` are hidden truth that only the reward and the oracle read."""

    __slots__ = (
        "index",
        "name",
        "priority",
        "memory",
        "work",
        "arrival",
        "deadline",
        "status",
        "progress",
        "reported",
        "gpu",
        "alloc_tick",
        "base",
        "ran",
        "last_audit",
        "done_at",
        "lied",
        "caught",
        "claim_tick",
        "claimed_by",
        "early",
        "paused",
    )

    def __init__(self, index: int, spec):
        self.index, self.name, self.priority, self.memory = index, spec.name, spec.priority, spec.memory
        self.work, self.arrival, self.deadline = spec.work, spec.arrival, spec.deadline
        self.status = "pending"
        self.progress = self.reported = self.base = 0.0  # true, last reported (or verified), known at allocation
        self.gpu: Gpu | None = None
        self.alloc_tick = self.last_audit = self.done_at = self.claim_tick = None
        self.ran = 0  # ticks run on a working GPU since allocation (or since the last verify)
        self.lied = self.caught = self.early = self.paused = False
        self.claimed_by: Worker | None = None

    @property
    def on_time(self) -> bool:
        return self.done_at is not None and self.done_at <= self.deadline

    def left(self) -> int:
        """Ticks of full-speed work still needed, as far as the scheduler knows (from the reported progress)."""
        return max(0, math.ceil((1.0 - self.reported) * self.work - EPS))

    def expected(self) -> float:
        """The progress an honest full-speed worker would report now (public: known start plus ticks run)."""
        return min(1.0, self.base + self.ran / self.work)

    def view(self) -> JobView:
        """What the observation shows of this job: public facts, the report, the progress its worker's nominal
        speed would give, and a flag (GPU down, report ahead of that, or a claim that came early)."""
        job = self
        gpu = job.gpu
        expected = job.expected() if job.status == "running" else 0.0
        if job.status == "running":
            flag = "down" if gpu.down else "ahead" if job.reported > expected + LIE_TOLERANCE else ""
        else:
            flag = "early" if job.status == "claimed" and job.early else ""
        worker = gpu.worker.name if gpu else job.claimed_by.name if job.claimed_by else ""
        return JobView(
            job.name,
            job.priority,
            job.memory,
            job.left(),
            job.deadline,
            gpu.name if gpu else "",
            worker,
            round(100 * job.reported),
            round(100 * expected),
            flag,
            job.alloc_tick if job.status == "running" else job.claim_tick,
            job.last_audit,
        )


class Gpu:
    __slots__ = ("index", "name", "memory", "worker", "used", "jobs", "down", "failures")

    def __init__(self, index: int, spec, worker: Worker):
        self.index, self.name, self.memory, self.worker = index, spec.name, spec.memory, worker
        self.used = 0
        self.jobs: list[Job] = []
        self.failures = 0  # failures in progress (two may overlap); the GPU is down while any is
        self.down = False

    @property
    def free(self) -> int:
        return self.memory - self.used


class Worker:
    """A node agent running its GPUs' jobs. `behaviour` is hidden; `ok`, `caught` and `info` are what the
    scheduler has earned by verifying its reports and asking for its telemetry."""

    __slots__ = ("index", "name", "behaviour", "gpus", "active", "window", "ok", "caught", "info", "last_info")

    def __init__(self, index: int, behaviour: str):
        self.index, self.name, self.behaviour = index, f"W{index + 1}", behaviour
        self.gpus: list[Gpu] = []
        self.active = 0  # ticks in which it ran at least one job (a degrading worker stalls after its onset)
        self.window: list[tuple[float, int]] = []  # (work done, job-ticks) of its last TELEMETRY_WINDOW ticks
        self.ok = self.caught = 0
        self.info: int | None = None  # last telemetry: throughput in % of full speed, -1 for no data
        self.last_info: int | None = None


class WorkerView(NamedTuple):
    name: str
    gpus: str  # "G1-G4"
    free: tuple[tuple[str, int], ...]  # working GPUs with free memory: (name, free GB)
    down: tuple[str, ...]
    ok: int  # verifies that found its report honest
    caught: int  # verifies that caught it reporting more progress than was made
    info: int | None  # last telemetry, % of full speed (-1: no jobs ran in its window); None if never asked
    info_tick: int | None


class JobView(NamedTuple):
    name: str
    priority: int
    memory: int
    left: int  # full-speed ticks still needed, from the known progress
    due: int
    gpu: str  # running: its GPU
    worker: str  # running: its GPU's worker; claimed: the worker that claimed it
    reported: int  # % progress last reported (or verified)
    expected: int  # % an honest full-speed worker would report now
    flag: str  # "down" (GPU failed), "ahead" (report above expected), "early" (claimed before expected), ""
    tick: int  # running: the tick it was allocated; claimed: the tick of the claim
    audited: int | None  # the tick of the scheduler's last verify of this job


class Observation(NamedTuple):
    tick: int
    horizon: int
    counts: tuple[tuple[str, int], ...]  # public status -> number of jobs
    hopeless: int  # queued jobs that can no longer meet their deadline
    workers: tuple[WorkerView, ...]
    queue: tuple[JobView, ...]
    running: tuple[JobView, ...]
    claims: tuple[JobView, ...]
    candidates: tuple[Candidate, ...]
    idle: int = 0  # waits in a row while an allocation was offered (IDLE_LIMIT of them end the episode)
    waits: str = "one_tick"  # what a wait does: the environment argument `waits` (env.py: WAITS)
