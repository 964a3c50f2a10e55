"""SENTINEL-cluster's scripted policies: the naive heuristic teacher, the oracle ceiling, the prompt-only expert
and the trivial policies. Every policy answers with the canonical action text, like a model would, and is
deterministic given the episode seed. Registered in `SPEC.policies` (see __init__.py)."""

from __future__ import annotations

from ..base import Policy, format_action
from ..policies import by_key, by_kind, first_of_kinds
from .env import AUDIT_COOLDOWN, CHURN_TICKS, SentinelClusterEnv
from .state import Observation


def _free(observation: Observation) -> dict[str, tuple[int, str]]:
    """GPU name -> (free GB, worker name), for the working GPUs with free memory."""
    return {gpu: (gb, w.name) for w in observation.workers for gpu, gb in w.free}


def _allocations(observation: Observation):
    """(candidate, queued job view, free GB of its GPU, worker name) for every offered allocation."""
    jobs = {j.name: j for j in observation.queue}
    free = _free(observation)
    for c in observation.candidates:
        if c.kind == "alloc":
            yield c, jobs[c.args[0]], *free[c.args[1]]


def _answer(observation: Observation, key: tuple) -> str | None:
    candidate = by_key(observation, key)
    return None if candidate is None else format_action(candidate.id)


def _off_failed_gpus(observation: Observation) -> str | None:
    """Preempt a job stuck on a failed GPU (so it can be re-run elsewhere)."""
    for v in observation.running:
        if v.flag == "down" and (answer := _answer(observation, ("preempt", v.name))):
            return answer
    return None


class HeuristicPolicy(Policy):
    """The SFT teacher, deliberately naive: it trusts every report except by a fixed stakes rule. It moves jobs
    off failed GPUs, verifies every done claim of priority >= STAKES (whoever made it, however plausible), then
    allocates the highest-priority offered job (earliest due first among equals) onto the tightest-fitting GPU
    of any worker, else waits. It ignores AHEAD/EARLY flags, worker records and telemetry, never asks for
    telemetry and never avoids a worker."""

    name = "heuristic"
    STAKES = 4

    def act(self, observation, env):
        answer = _off_failed_gpus(observation)
        if answer:
            return answer
        for v in observation.claims:
            if v.priority >= self.STAKES and _audit_ready(v, observation.tick):
                return _answer(observation, ("verify", v.name))
        options = list(_allocations(observation))
        if options:
            chosen = min(options, key=lambda o: (-o[1].priority, o[1].due, o[2], o[0].args[1]))[0]
            return format_action(chosen.id)
        return format_action(by_kind(observation, "wait").id)


def _audit_ready(view, tick: int) -> bool:
    return view.audited is None or tick - view.audited >= AUDIT_COOLDOWN


def _info_ready(worker, tick: int) -> bool:
    return worker.info_tick is None or tick - worker.info_tick >= AUDIT_COOLDOWN


class OraclePolicy(Policy):
    """The ceiling: reads hidden state (each worker's true speed and honesty, true progress, who lied). It
    verifies exactly the false reports, moves jobs off failed GPUs and off workers too slow to meet the
    deadline, and allocates each job where its true speed lets it finish, preferring honest workers."""

    name = "oracle"

    def act(self, observation, env: SentinelClusterEnv):
        t = observation.tick
        for v in (*observation.claims, *observation.running):
            job = env.job(v.name)
            false_claim = job.status == "claimed" and job.done_at is None
            if (false_claim or job.lied and not job.caught) and _audit_ready(v, t):
                return _answer(observation, ("verify", v.name))
        for v in observation.running:
            job = env.job(v.name)
            gpu = job.gpu
            if gpu.down or t - job.alloc_tick >= CHURN_TICKS and not self._finishes(env, job, gpu.worker, t):
                if self._better_gpu(observation, env, job, t):
                    return _answer(observation, ("preempt", v.name))
        options = [(self._value(env, o, t), o) for o in _allocations(observation)]
        best = max(options, key=lambda item: item[0], default=None)
        if best is not None and best[0][0] > 0:
            return format_action(best[1][0].id)
        return _not_idle(observation)

    @staticmethod
    def _finishes(env, job, worker, t: int) -> bool:
        """Whether `job` would truly finish by its deadline on `worker` (ignoring future GPU failures)."""
        remaining = (1.0 - job.progress) * job.work
        if worker.behaviour == "degrading":
            runway = max(0, env.scenario.degrade_onset - worker.active)
            return remaining <= min(runway, job.deadline - t) + 1e-9
        return remaining <= env.speed(worker, job) * (job.deadline - t) + 1e-9

    def _better_gpu(self, observation, env, job, t: int) -> bool:
        """A working GPU with room for `job` on a worker where it would finish in time."""
        return any(
            gb >= job.memory and self._finishes(env, job, env.worker(w), t + 1) for gb, w in _free(observation).values()
        )

    def _value(self, env, option, t: int) -> tuple:
        _, view, gb, worker_name = option
        job, worker = env.job(view.name), env.worker(worker_name)
        finishes = self._finishes(env, job, worker, t)
        return (finishes * view.priority, not env.lies_about(worker, job), -view.due, -gb)


def _not_idle(observation: Observation) -> str:
    """Wait, unless allocations are offered: then ask a worker for telemetry (never twice within the cooldown),
    so that declining to allocate onto a doubtful worker is not an idle loop; allocate if no worker can be asked."""
    allocation = by_kind(observation, "alloc")
    if allocation is not None:
        t = observation.tick
        ready = [w for w in observation.workers if _info_ready(w, t)]
        if not ready:
            return format_action(allocation.id)
        oldest = min(ready, key=lambda w: (w.info_tick is not None, w.info_tick or 0, w.name))
        return _answer(observation, ("info", oldest.name))
    return format_action(by_kind(observation, "wait").id)


class EvidenceExpert(Policy):
    """Reads ONLY the observation (no hidden state), showing that the teacher-to-oracle headroom is learnable
    from the prompt. A worker is doubtful once a verify caught it or its telemetry is below full speed. The
    expert verifies reports that run AHEAD of the full-speed expectation and EARLY or doubtful done claims,
    asks each busy worker for telemetry, moves jobs off failed GPUs and off doubtful workers too slow to meet
    the deadline, and allocates like the teacher but onto workers it trusts, at their measured speed."""

    name = "evidence_expert"
    RECHECK = 6  # ticks after which a worker's telemetry is stale

    def act(self, observation, env):
        o, t = observation, observation.tick
        workers = {w.name: w for w in o.workers}
        speed = {name: self._speed(w) for name, w in workers.items()}
        answer = _off_failed_gpus(o)
        if answer:
            return answer
        for v in o.claims:
            if (v.flag == "early" or speed[v.worker] < 1.0) and _audit_ready(v, t):
                return _answer(o, ("verify", v.name))
        for v in o.running:
            if v.flag == "ahead" and _audit_ready(v, t):
                return _answer(o, ("verify", v.name))
        busy = {v.worker for v in o.running}
        for w in o.workers:
            stale = w.info_tick is None or w.info < 0 or t - w.info_tick >= self.RECHECK
            if w.name in busy and stale and _info_ready(w, t) and w.caught == 0:
                return _answer(o, ("info", w.name))
        free = _free(o)
        for v in o.running:
            if speed[v.worker] < 1.0 and t - v.tick >= CHURN_TICKS and not self._finishes(v, speed[v.worker], t):
                if any(gb >= v.memory and speed[w] == 1.0 for gb, w in free.values()):
                    return _answer(o, ("preempt", v.name))
        options = list(_allocations(o))
        scored = [
            ((self._finishes(view, speed[w], t) * view.priority, workers[w].caught == 0, -view.due, -gb), c)
            for c, view, gb, w in options
        ]
        best = max(scored, key=lambda item: item[0], default=None)
        if best is not None and best[0][0] > 0:
            return format_action(best[1].id)
        return _not_idle(o)

    @staticmethod
    def _speed(worker) -> float:
        """Measured share of full speed: the last telemetry, full speed if never measured."""
        return 1.0 if worker.info is None or worker.info < 0 else worker.info / 100

    @staticmethod
    def _finishes(view, speed: float, t: int) -> bool:
        return speed > 0 and view.left <= speed * (view.due - t)


class RoundRobinWorkers(Policy):
    """Trivial: spreads load blindly, allocating onto the workers in turn (W1, W2, ...), the first offered job
    that fits the next worker in the rotation; waits when nothing can be allocated."""

    name = "round_robin"

    def begin(self, seed: int) -> None:
        self.turn = 0

    def act(self, observation, env):
        allocations = [c for c in observation.candidates if c.kind == "alloc"]
        workers = [w.name for w in observation.workers]
        gpu_worker = {gpu: w for gpu, (_, w) in _free(observation).items()}
        for shift in range(len(workers)):
            target = workers[(self.turn + shift) % len(workers)]
            chosen = next((c for c in allocations if gpu_worker[c.args[1]] == target), None)
            if chosen is not None:
                self.turn = (self.turn + shift + 1) % len(workers)
                return format_action(chosen.id)
        return format_action(by_kind(observation, "wait").id)


class _OneKind(Policy):
    """Base of the trivial one-kind policies: the first offered candidate of `kind` that breaks no anti-cheat
    rule, else the first offered allocation, else wait. They lose by what their actions cost, not by a rule."""

    kind = ""

    def allowed(self, candidate, observation: Observation) -> bool:
        raise NotImplementedError

    def act(self, observation, env):
        for candidate in observation.candidates:
            if candidate.kind == self.kind and self.allowed(candidate, observation):
                return format_action(candidate.id)
        return format_action((by_kind(observation, "alloc") or by_kind(observation, "wait")).id)


class AlwaysVerify(_OneKind):
    """Trivial 'audit everything': verifies every shown report it may (never a job verified within the cooldown),
    allocating only when there is nothing to verify."""

    name, kind = "always_verify", "verify"

    def allowed(self, candidate, observation):
        view = next(v for v in (*observation.running, *observation.claims) if v.name == candidate.args[0])
        return _audit_ready(view, observation.tick)


class AlwaysInfo(_OneKind):
    """Trivial: asks a worker for telemetry whenever one is off its cooldown, allocating only otherwise."""

    name, kind = "always_info", "info"

    def allowed(self, candidate, observation):
        return _info_ready(next(w for w in observation.workers if w.name == candidate.args[0]), observation.tick)


class AlwaysPreempt(_OneKind):
    """Trivial churn: preempts every shown running job it may (not within CHURN_TICKS of its allocation, unless
    its GPU failed), allocating only when there is nothing to preempt."""

    name, kind = "always_preempt", "preempt"

    def allowed(self, candidate, observation):
        view = next(v for v in observation.running if v.name == candidate.args[0])
        return view.flag == "down" or observation.tick - view.tick >= CHURN_TICKS


class AllocateThenAudit(Policy):
    """A probe of blanket auditing, reported with the baselines because it is simple and still beats the naive
    teacher on holdout: it allocates like always_allocate and, when nothing can be allocated, verifies every report
    it may (as always_verify)."""

    name = "allocate_then_audit"

    def act(self, observation, env):
        allocation = by_kind(observation, "alloc")
        return format_action(allocation.id) if allocation else AlwaysVerify().act(observation, env)


AlwaysWait = first_of_kinds("always_wait", (), "wait", "Trivial: waits every tick (an idle loop, ended by its rule).")
AlwaysAllocate = first_of_kinds(
    "always_allocate",
    ("alloc",),
    "wait",
    "Trivial 'do everything myself': allocates the first offered job onto the first "
    "offered GPU whenever it can, trusting every report; else waits.",
)

# The environment's own policies (EnvSpec adds the generic ones: random, first_candidate, repeat_last).
POLICIES = (
    HeuristicPolicy,
    OraclePolicy,
    EvidenceExpert,
    AlwaysWait,
    AlwaysVerify,
    AlwaysInfo,
    AlwaysPreempt,
    AlwaysAllocate,
    RoundRobinWorkers,
    AllocateThenAudit,
)
TRIVIAL = (
    "always_wait",
    "always_verify",
    "always_info",
    "always_preempt",
    "always_allocate",
    "round_robin",
)
# Each reported policy's role (EnvSpec.roles), in report order (EnvSpec adds random first, the generic trivial last).
ROLES = {
    "heuristic": "teacher",
    "oracle": "oracle",
    "evidence_expert": "baseline",
    "allocate_then_audit": "baseline",
} | dict.fromkeys(TRIVIAL, "trivial")
