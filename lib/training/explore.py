"""Exploration, measured: can GRPO sample what beats the teacher?

Used every GRPO step by the reward function (lib/training/train.py), which logs
- `explore/beats_reference`: the share of groups in which some sample scores above the reference policy's own
  action at that state (the corpus row's `reference_return`, scored the same way);
- `explore/best_minus_reference`: the mean over groups of the best sample's return minus that reference return;
and by the candidate sampler (lib/training/rollout.py), which logs `explore/candidate_entropy` (the policy's entropy
over the state's candidates), `explore/p_best` and `explore/p_reference` (its probability of the best answer and of
the reference's own answer); and by `python -m lib probe-explore`, which reports the same numbers for any model
folder or adapter on a fixed set of states.
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


def group_metrics(
    rewards: list[float],
    reference_returns: list[float],
    group_size: int,
    tolerance: float = 1e-9,
) -> dict:
    """Per-step exploration metrics over consecutive groups of `group_size` samples (TRL keeps each prompt's
    samples together), each group compared with the reference policy's return at its state.

    >>> group_metrics([0.2, 0.9, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5], 2)
    {'explore/beats_reference': 0.5, 'explore/best_minus_reference': 0.2, 'explore/mean_minus_reference': 0.025}
    """
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    beats, best_gap, mean_gap = [], [], []
    for start in range(0, len(rewards), group_size):
        group, reference = rewards[start : start + group_size], reference_returns[start]
        beats.append(max(group) > reference + tolerance)
        best_gap.append(max(group) - reference)
        mean_gap.append(sum(group) / len(group) - reference)
    n = len(beats)
    return {
        "explore/beats_reference": sum(beats) / n,
        "explore/best_minus_reference": round(sum(best_gap) / n, 6),
        "explore/mean_minus_reference": round(sum(mean_gap) / n, 6),
    }


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
    from ..envs import get_spec
    from ..episodes import candidate_returns
    from ..inference import load_policy_model
    from .corpus import read_jsonl

    model, tokenizer, source = load_policy_model(model_dir, config.model, adapter)
    spec = get_spec(config.env)
    env = spec.make_env()
    rows = read_jsonl(run.read_stage("corpus")["outputs"]["grpo_prompts.jsonl"])[:states]
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
            **{k: mean(k) for k in ("beats_reference", "best_minus_reference", "entropy", "mass", "p_best")},
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


def ablation_table(runs: list, split: str = "holdout") -> str:
    """Markdown: for each run (forks of one base, quickchecked on the same seeds) its overrides, GRPO's mean return,
    GRPO - SFT and GRPO - teacher with their paired CIs, the mean frac_reward_zero_std and explore/beats_reference
    over the first quarter, and its GRPO minus the first run's GRPO, paired by seed."""
    import json
    from pathlib import Path

    from ..stats import paired_difference

    def load(run):
        run = Path(run)
        name = "quickcheck.json" if split == "holdout" else f"quickcheck_{split}.json"
        path = run / name
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: run `python -m lib quickcheck --run-dir {run} --episodes N"
                f"{'' if split == 'holdout' else ' --split ' + split}` first"
            )
        quick = json.loads(path.read_text())
        if "returns" not in quick:
            raise ValueError(f"{path} has no per-seed returns (made by an older quickcheck); run it again")
        manifest = json.loads((run / "manifest.json").read_text())
        grpo = json.loads((run / "grpo" / "stage.json").read_text())["metrics"]
        return quick, manifest.get("forked_from", {}).get("overrides", {}), grpo

    def ci(d):
        return f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"

    loaded = [load(r) for r in runs]
    reference = {int(k): v for k, v in loaded[0][0]["returns"]["grpo"].items()}
    lines = [
        "| run | change | GRPO | GRPO - SFT | GRPO - teacher | zero-std | beats ref. (1st quarter) "
        "| GRPO - first run's GRPO |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run, (quick, overrides, grpo) in zip(runs, loaded):
        returns = {int(k): v for k, v in quick["returns"]["grpo"].items()}
        change = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "(base recipe)"
        versus = "reference" if run == runs[0] else ci(paired_difference(returns, reference))
        lines.append(
            f"| {Path(run).name} | {change} | {quick['policies']['grpo']['mean_return']:.3f} | "
            f"{ci(quick['paired']['grpo-sft'])} | {ci(quick['paired']['grpo-teacher'])} | "
            f"{grpo.get('frac_reward_zero_std_mean', float('nan')):.3f} | "
            f"{grpo.get('explore/beats_reference_first_quarter', float('nan')):.3f} | {versus} |"
        )
    return "\n".join(lines)
