"""`python -m lib probe-explore`: exploration on a fixed set of states, for any model folder or adapter.

On the first GRPO prompts of a run: the policy's distribution over each state's candidates (entropy, mass on the
candidates, probability of a best action) and, in expectation and without sampling noise, the `explore/*` numbers
GRPO logs there while it trains (lib/reward.py: `group_metrics`), and the policy's probability of the reference's
own answer (`p_reference`: GRPO's `explore/p_reference` at its start). A probe, not a stage: it reads a run and
writes only the JSON it is asked to (--out).
"""

from __future__ import annotations

from ..candidates import answers, distribution, entropy, mass, score_answers
from ..envs.base import format_action


def policy_candidate_distribution(model, tokenizer, messages: list[dict], observation) -> dict:
    """The policy over this observation's candidates (lib/candidates.py): entropy (nats), the mass the unconstrained
    model puts on the candidate answers at all, and each answer's probability renormalised over the candidates."""
    offered = answers(observation)
    [logprobs] = score_answers(model, tokenizer, [messages], [offered])
    probs = distribution(logprobs)
    return {"entropy": entropy(probs), "mass": mass(logprobs), "by_answer": dict(zip(offered, probs))}


def expected_group_metrics(
    distribution: dict[str, float], returns: dict[str, float], reference: float, invalid_score: float, group_size: int
) -> dict:
    """What `group_metrics` expects for one state when `group_size` answers are sampled from `distribution`
    (answer -> probability; the missing mass is invalid output, scored `invalid_score`): the chance that some
    sample beats `reference`, and the expected best sample minus `reference`. Exact, no sampling noise.

    >>> m = expected_group_metrics({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.0}, 0.5, -0.1, 2)
    >>> m["beats_reference"], m["best_minus_reference"]
    (0.75, 0.25)
    """
    by_value: dict[float, float] = {invalid_score: max(0.0, 1.0 - sum(distribution.values()))}
    for answer, p in distribution.items():
        by_value[returns[answer]] = by_value.get(returns[answer], 0.0) + p
    beats = sum(p for value, p in by_value.items() if value > reference + 1e-9)
    expected_best, below = 0.0, 0.0
    for value in sorted(by_value):
        expected_best += value * ((below + by_value[value]) ** group_size - below**group_size)
        below += by_value[value]
    return {"beats_reference": 1 - (1 - beats) ** group_size, "best_minus_reference": expected_best - reference}


def probe(config, run, model_dir: str, adapter: str | None = None, states: int = 64, margin: float = 0.05) -> dict:
    """`python -m lib probe-explore`: on the first `states` GRPO prompts of the run, the policy's distribution
    over the candidates (entropy, mass on candidates, probability of a best action) and the exploration
    metrics GRPO would log there with `grpo.num_generations` samples, in expectation. Split into all states and
    the improvable ones (some candidate beats the reference's own choice by `margin`)."""
    from ..episodes import candidate_returns
    from ..inference import load_policy_model
    from ..io import read_records

    model, tokenizer, source = load_policy_model(model_dir, config.model, adapter)
    spec = config.spec
    env = spec.make_env()
    rows = read_records(run.read_stage("corpus")["outputs"]["grpo_prompts.jsonl"], missing_ok=False)[:states]
    per_state = []
    for row in rows:
        observation = env.restore(row["seed"], row["split"], row["history"])
        returns = candidate_returns(
            env, row["seed"], row["split"], row["history"], observation, spec.make_policy(config.reference_policy)
        )
        spread = policy_candidate_distribution(model, tokenizer, row["prompt"], observation)
        best = max(returns.values())
        reference = row["reference_return"]
        # choosing among the candidates, the policy is the renormalised distribution; free text also says other things
        share = 1.0 if config.model.action_space == "candidates" else spread["mass"]
        absolute = {answer: p * share for answer, p in spread["by_answer"].items()}
        expected = expected_group_metrics(
            absolute, returns, reference, env.invalid_penalty, config.grpo.num_generations
        )
        best_answer = max(returns, key=returns.get)
        per_state.append(
            {
                "improvable": best - reference >= margin,
                "entropy": spread["entropy"],
                "mass": spread["mass"],
                "p_best": sum(p for a, p in absolute.items() if returns[a] == best),
                "p_reference": absolute.get(row["reference_answer"], 0.0),  # GRPO's explore/p_reference here
                "best_kind": {format_action(c.id): c.kind for c in observation.candidates}[best_answer],
                **expected,
            }
        )

    def summary(items):
        if not items:
            return {"states": 0}
        mean = lambda key: round(sum(i[key] for i in items) / len(items), 4)  # noqa: E731
        return {
            "states": len(items),
            **{
                k: mean(k)
                for k in ("beats_reference", "best_minus_reference", "entropy", "mass", "p_best", "p_reference")
            },
        }

    kinds = sorted({s["best_kind"] for s in per_state if s["improvable"]})
    return {
        "model": source,
        "group_size": config.grpo.num_generations,
        "margin": margin,
        "all": summary(per_state),
        "improvable": summary([s for s in per_state if s["improvable"]]),
        "improvable_by_best_kind": {
            k: summary([s for s in per_state if s["improvable"] and s["best_kind"] == k]) for k in kinds
        },
    }
