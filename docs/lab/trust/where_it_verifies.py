"""Where a trust SFT verifies, by the inputs of the teacher's rule (a lab probe, not part of the package).

    python docs/lab/trust/where_it_verifies.py RUN_DIR [EPISODES] [TAU]

At every state of the teacher's episodes on EPISODES validation seeds (the states `python -m lib agreement`
scores), the SFT's most likely candidate, with TAU times the resampling's log prior shift taken off each kind
(`agreement --logit-adjust`), is tallied by the three things the teacher's rule reads: the stakes band, whether the
most trusted usable slot is under 0.65, and whether any verify allowance is left. Prints, per cell, the teacher's
and the model's verify counts; writes nothing.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from lib.envs.sentinel_trust.policies import TRUST_VERIFY_BELOW
from lib.episodes import run_episode
from lib.evaluation.closed_loop import sft_model_dir
from lib.inference import load_policy_model
from lib.runs import Run, read_config, read_stage_record
from lib.stats import kind_log_weights
from lib.training.imitation import teacher_state_scores
from lib.training.labelling import validation_seeds


def cell(observation) -> tuple[str, bool, bool]:
    usable = [e for e in observation.slots if e.slot not in observation.failed_here] or list(observation.slots)
    top = max((e.right + 1) / (e.calls + 2) for e in usable)
    return observation.band, top < TRUST_VERIFY_BELOW, observation.verify_allowance > 0


def main(run_dir: Path, episodes: int, tau: float) -> None:
    config = read_config(run_dir)
    shift = {}
    if tau:
        weights = kind_log_weights(read_stage_record(run_dir, "sft").get("metrics", {}).get("kind_mix"))
        shift = {kind: tau * w for kind, w in weights.items()}
    loaded = load_policy_model(sft_model_dir(Run(run_dir, config)), config.model)
    rows, scores = teacher_state_scores(config, loaded, episodes)
    env, teacher = config.spec.make_env(), config.spec.make_policy(config.spec.teacher)
    cells = [
        cell(t["observation"])
        for seed in validation_seeds(episodes)
        for t in run_episode(env, teacher, seed, "train", keep_transitions=True).transitions
    ]
    assert len(cells) == len(rows), (len(cells), len(rows))
    tally: Counter = Counter()
    for (_, _, ids, chosen, kinds), raw, key in zip(rows, scores, cells):
        values = [v - shift.get(kinds[i], 0.0) for i, v in zip(ids, raw)]
        pick = ids[max(range(len(values)), key=values.__getitem__)]
        tally[(key, "states")] += 1
        tally[(key, "teacher verifies")] += kinds[chosen] == "verify"
        tally[(key, "model verifies")] += kinds[pick] == "verify"
        tally[(key, "same answer")] += pick == chosen
    print(f"{run_dir.name}, tau {tau}, {episodes} episodes, {len(rows)} states")
    print("| band | top trust < 0.65 | allowance left | states | teacher verifies | model verifies | same answer |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for key in sorted({k for k, _ in tally}):
        counts = [tally[(key, c)] for c in ("states", "teacher verifies", "model verifies", "same answer")]
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(map(str, counts)) + " |")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0]), int(args[1]) if len(args) > 1 else 20, float(args[2]) if len(args) > 2 else 0.0)
