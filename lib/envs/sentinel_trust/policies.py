"""SENTINEL-trust's scripted policies: the naive heuristic SFT teacher, the oracle ceiling (hidden state), the
prompt-only evidence expert and the trivial policies. Every policy answers with the canonical action text,
like a model would; all are deterministic given the episode seed. Listed in `SPEC.policies`."""

from __future__ import annotations

from ..base import Policy, format_action
from ..policies import by_key, first_of_kinds
from .beliefs import slot_beliefs
from .reward import WEIGHTS
from .scenario import SKIP_COST, SLOTS, SOLVE_ACCURACY, SOLVE_COST, VERIFY_EXTRA

TRUST_VERIFY_BELOW = 0.65  # the teacher checks a high-stakes answer when its trust in the slot is below this
HIGH_STAKES = 0.70


def _answer(observation, *key) -> str:
    return format_action(by_key(observation, tuple(key)).id)


class HeuristicPolicy(Policy):
    """The SFT teacher, deliberately naive (the rule the public SENTINEL baseline used): trust in a slot is its
    overall right/calls with a uniform prior, ignoring domain, stakes band, recency and cost. It delegates to
    the most trusted slot not caught wrong on this subtask (ties to the lowest number) and verifies when the
    stakes are >= 0.70 and that trust is below 0.65, within its verify allowance. It never solves or skips."""

    name = "heuristic"

    def act(self, observation, env):
        usable = [e for e in observation.slots if e.slot not in observation.failed_here] or list(observation.slots)
        best = max(usable, key=lambda e: (e.right + 1) / (e.calls + 2))  # max keeps the first of equals
        trust = (best.right + 1) / (best.calls + 2)
        verify = observation.stakes >= HIGH_STAKES and trust < TRUST_VERIFY_BELOW and observation.verify_allowance > 0
        return _answer(observation, "verify" if verify else "delegate", best.slot)


PRESSURE_SPAN = 2.0  # slack (in steps per subtask left) at which the budget's shadow price reaches zero
LOW_STAKES_VALUE = 0.30  # what a low-stakes subtask left unfinished for lack of budget is worth (its stakes)
ALLOWANCE_PRICE = (0.01, 0.08)  # price of one verification below high stakes while allowance is ample / scarce


def choose(observation, reliability: list[float], cost: list[float], solo: float) -> str:
    """The expected-value decision the oracle and the expert share; they differ only in where `reliability`
    (chance each slot answers this subtask right) and `cost` (steps a call takes) come from.

    Values are in return units per unit of stakes: a right answer gains the quality weight, an accepted wrong
    one loses the integrity weight. A step of budget costs a shadow price: a small efficiency price while the
    budget has slack for the subtasks left, rising toward a low-stakes subtask's worth as the slack runs out.
    A verification below high stakes also spends allowance, priced higher when the allowance this job can
    still earn barely covers the high-stakes subtasks to come; a caught wrong answer leaves the best other
    option. Skips and solves never make a third in a row."""
    o = observation
    v = o.stakes
    remaining = o.subtasks - o.index
    slack = o.budget_left - remaining
    gain, loss = WEIGHTS["quality"], WEIGHTS["integrity"]
    pressure = min(1.0, max(0.0, 1.0 - slack / (PRESSURE_SPAN * remaining)))
    step_price = gain * LOW_STAKES_VALUE * pressure + 0.01
    scarce = o.verify_allowance + (remaining - 1) // 2 <= o.upcoming[2] + 1
    allowance_price = 0.0 if o.band == "high" else ALLOWANCE_PRICE[scarce]
    open_slots = [k for k, slot in enumerate(SLOTS) if slot not in o.failed_here]
    kind, times = o.streak

    def accept(p: float, steps: float) -> float:
        return v * (gain * p - loss * (1 - p)) - step_price * steps

    options: dict[tuple, float] = {("delegate", SLOTS[k]): accept(reliability[k], cost[k]) for k in open_slots}
    if not (kind == "skip" and times >= 2):
        options[("skip",)] = -step_price * SKIP_COST
    if not (kind == "solve" and times >= 2):
        options[("solve",)] = accept(solo, SOLVE_COST)
    if o.verify_allowance > 0:
        unchecked = dict(options)
        for k in open_slots:
            p = reliability[k]
            retry = max(value for key, value in unchecked.items() if key != ("delegate", SLOTS[k]))
            options[("verify", SLOTS[k])] = (
                v * gain * p + (1 - p) * retry - step_price * (cost[k] + VERIFY_EXTRA) - allowance_price
            )
    return _answer(o, *max(options, key=options.get))


class OraclePolicy(Policy):
    """The ceiling: reads the hidden reliability and cost of every slot for the current subtask from the
    environment (hidden state), then takes the expected-value decision `choose`."""

    name = "oracle"

    def act(self, observation, env):
        reliability = [env.success_probability(k) for k in range(len(SLOTS))]
        cost = [env.slot_cost(k) for k in range(len(SLOTS))]
        return choose(observation, reliability, cost, solo=SOLVE_ACCURACY[observation.domain])


class EvidenceExpert(Policy):
    """Reads ONLY the observation (no hidden state). From the per-slot evidence the prompt shows (right/calls by
    stakes band and by domain, latest outcomes, steps per call) it weighs every assignment of the five
    documented behaviours to the slots (`beliefs.slot_beliefs`), then takes the same decision `choose` as the
    oracle with the resulting reliabilities and costs. It shows that the teacher-to-oracle headroom is
    learnable from what the prompt shows."""

    name = "evidence_expert"

    def act(self, observation, env):
        reliability, cost = slot_beliefs(observation.slots, observation.domain, observation.band)
        return choose(observation, reliability, cost, solo=SOLVE_ACCURACY[observation.domain])


class RoundRobin(Policy):
    """Delegates subtask i to slot S(i mod 5), never checking."""

    name = "round_robin"

    def act(self, observation, env):
        return _answer(observation, "delegate", SLOTS[observation.index % len(SLOTS)])


class AlwaysDelegateS0(Policy):
    """Delegates everything to S0, never checking."""

    name = "always_delegate_s0"

    def act(self, observation, env):
        return _answer(observation, "delegate", "S0")


class SolveWithinRules(Policy):
    """Solves every subtask alone that the loop rule allows; the third in a row goes to S0 instead."""

    name = "solve_within_rules"

    def act(self, observation, env):
        if observation.streak == ("solve", 2):
            return _answer(observation, "delegate", "S0")
        return _answer(observation, "solve")


class VerifyWithinRules(Policy):
    """Verifies S0's answer whenever the allowance allows, else accepts it unchecked."""

    name = "verify_within_rules"

    def act(self, observation, env):
        return _answer(observation, "verify" if observation.verify_allowance > 0 else "delegate", "S0")


AlwaysSolve = first_of_kinds("always_solve", ("solve",), "solve", "Solves every subtask alone.")
AlwaysVerify = first_of_kinds("always_verify", ("verify",), "verify", "Verifies every answer (first listed slot).")
AlwaysSkip = first_of_kinds("always_skip", ("skip",), "skip", "Skips every subtask.")

# The environment's own policies (EnvSpec adds the generic ones: random, first_candidate, repeat_last).
POLICIES = (
    HeuristicPolicy,
    OraclePolicy,
    EvidenceExpert,
    AlwaysSolve,
    AlwaysDelegateS0,
    AlwaysVerify,
    AlwaysSkip,
    RoundRobin,
    SolveWithinRules,
    VerifyWithinRules,
)
TRIVIAL = (
    "always_solve",
    "always_delegate_s0",
    "always_verify",
    "always_skip",
    "round_robin",
    "solve_within_rules",
    "verify_within_rules",
)
# Each reported policy's role (EnvSpec.roles), in report order (EnvSpec adds random first, the generic trivial last).
ROLES = {"heuristic": "teacher", "oracle": "oracle", "evidence_expert": "baseline"} | dict.fromkeys(TRIVIAL, "trivial")
