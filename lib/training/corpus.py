"""Stage `corpus`: SFT transcripts from the environment's teacher and GRPO prompts sampled from rollouts at every
episode position, all on `train` seeds. Every file is fingerprinted (sha256) into the run manifest.

`python -m lib stage corpus --profile P --run-dir outputs/<id>`; notebook 01_build_corpus calls the same code.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path

from tqdm.auto import tqdm

from ..config import RunConfig
from ..envs import get_spec
from ..envs.base import Policy, format_action
from ..episodes import candidate_returns, run_episode, scripted_policy
from ..io import atomic_write_text
from ..models import sha256_file
from ..parallel import cores, fork_map
from ..runs import Run
from .dagger import dagger_rows, dagger_seeds
from .rows import sft_row

INFORMATIVE_SPREAD = 0.05  # a state enters GRPO only if its candidates' returns differ by at least this


class CorpusHashError(RuntimeError):
    """A corpus file's sha256 differs from the config's expected_hash."""


def _write_jsonl(path: Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


class _NoisyTeacher(Policy):
    """The environment's teacher, with DART-style noise: with probability `noise` a random candidate (not of a kind
    in `excluded`, such as ending the episode) is executed instead of the teacher's action. `labels` keeps
    what the teacher chose at each step."""

    def __init__(self, spec, noise: float, rng: random.Random, teacher: str | None = None, excluded=()):
        self.teacher = scripted_policy(spec, teacher or spec.teacher)
        self.noise, self.rng, self.labels = noise, rng, []
        self.excluded = tuple(excluded)

    def begin(self, seed: int) -> None:
        self.teacher.begin(seed)
        self.labels = []

    def act(self, observation, env) -> str:
        action = self.teacher.act(observation, env)
        self.labels.append(action)
        if self.noise and self.rng.random() < self.noise:
            options = [c for c in observation.candidates if c.kind not in self.excluded]
            if options:
                return format_action(self.rng.choice(options).id)
        return action


def sft_rows(
    spec,
    env,
    seeds,
    noise: float = 0.0,
    rng: random.Random | None = None,
    smoothing: float = 0.0,
    smoothing_rng: random.Random | None = None,
    teacher: str | None = None,
    excluded: tuple[str, ...] = (),
) -> list[dict]:
    """Teacher transcripts: one row per state, labelled with the teacher's action there.

    With `noise` > 0 (DART-style noise injection) the episode sometimes continues, through a random candidate of
    a kind not in `excluded`, from a state off the teacher's own path, which a learner that makes one mistake
    will also reach. Every row is labelled with what the teacher does at that state (cloning the noisy teacher's
    executed actions instead was retired: docs/RESULTS.md, lever index). The executed action is recorded as
    `executed` and the teacher's as `teacher`.

    With `smoothing` > 0 (label smoothing over the offered answers), each row's label is, with that probability, a
    uniformly drawn other candidate of its state instead (`label_source: smoothed`). An SFT on these rows still
    answers the teacher's choice most often, and keeps the other candidates in the policy's support, so that
    on-policy GRPO can sample, and push up, an action that beats the teacher."""
    policy = _NoisyTeacher(spec, noise, rng or random.Random(0), teacher, excluded)
    smoothing_rng = smoothing_rng or random.Random(0)
    rows = []
    for seed in seeds:
        episode = run_episode(env, policy, seed, "train", keep_transitions=True)
        for position, (t, teacher) in enumerate(zip(episode.transitions, policy.labels)):
            content, source = teacher, "teacher"
            if smoothing and smoothing_rng.random() < smoothing:
                others = [a for a in (format_action(c.id) for c in t["observation"].candidates) if a != content]
                if others:
                    content, source = smoothing_rng.choice(others), "smoothed"
            rows.append(
                sft_row(env, t["observation"], seed, position, t["history"], t["action"], teacher, content, source)
            )
    return rows


def _rollout_states(spec, env, seeds, policies: list[str]) -> tuple[dict[int, list[tuple[dict, object]]], int]:
    """Every state of each policy's episodes on `seeds` (train split) with its observation, by episode position;
    and how many there are."""
    by_position: dict[int, list[tuple[dict, object]]] = {}
    seen = 0
    for seed in seeds:
        for name in policies:
            episode = run_episode(env, spec.make_policy(name), seed, "train", keep_transitions=True)
            for position, t in enumerate(episode.transitions):
                seen += 1
                state = {"seed": seed, "split": "train", "history": t["history"], "position": position}
                by_position.setdefault(position, []).append((state, t["observation"]))
    return by_position, seen


def _scored(env, states: list[tuple[dict, object]], reference: str, reference_policy, where, workers: int) -> list:
    """Every candidate's return at each state (the reference finishing the episode), in the states' order: here,
    or across `workers` forked processes, 8 states a call, when `where` names the environment."""
    if not (where is not None and workers > 1):
        return [candidate_returns(env, s["seed"], "train", s["history"], o, reference_policy) for s, o in states]
    chunks = [states[i : i + 8] for i in range(0, len(states), 8)]
    calls = [(*where, reference, [(s["seed"], s["history"], o) for s, o in chunk]) for chunk in chunks]
    return [r for part in fork_map(_scored_states, calls, workers) for r in part]


def _grpo_row(env, state: dict, observation, returns: dict, reference_policy) -> dict:
    """A GRPO prompt row: the state, its prompt, every candidate's return, the best, and the reference's own
    answer and its return."""
    reference_policy.begin(state["seed"])
    restored = env.restore(state["seed"], "train", state["history"])  # `observation`, as this env's current state
    prompt = env.render(restored)  # before the reference acts: a policy that looks ahead moves the environment
    reference_answer = reference_policy.act(restored, env)
    return {
        **state,
        "prompt": prompt,
        "returns": returns,
        "best_return": max(returns.values()),
        "reference_answer": reference_answer,
        "reference_return": returns[reference_answer],
    }


def grpo_rows(
    spec,
    env,
    seeds,
    policies: list[str],
    n_prompts: int,
    reference: str,
    rng: random.Random,
    improvable_share: float = 0.0,
    improvable_margin: float = INFORMATIVE_SPREAD,
    *,
    where: tuple[str, dict | None] | None = None,
    workers: int = 1,
) -> tuple[list[dict], dict]:
    """States from rollouts of several policies, at every position, kept when the choice there matters.

    With `improvable_share` > 0, that share of the prompts (as far as the pool has them) are states where the
    reference policy's own choice is beaten: some candidate's return exceeds the reference's by at least
    `improvable_margin`. These are the states where RL can gain on the teacher. The rest are drawn as without it
    (any state where the choice matters, mostly ones where the teacher is right), so GRPO also practises what
    SFT should keep. Every row records every candidate answer's return (`returns`, the reference finishing the
    episode), `best_return`, and the reference's own answer and return (`reference_answer`, `reference_return`).

    `where` (the environment's name and arguments, from which a worker rebuilds it) and `workers` > 1 score the
    states across forked processes (lib/parallel.py): in one process they took 88% of `gpu-smollm2`'s corpus stage
    (cProfile, this project's 2-core CPU)."""
    reference_policy = spec.make_policy(reference)
    by_position, seen = _rollout_states(spec, env, seeds, policies)
    examined = 0
    n_improvable = round(improvable_share * n_prompts)
    improvable: list[tuple[int, dict]] = []
    other: list[tuple[int, dict]] = []
    positions = sorted(by_position)
    for bucket in by_position.values():
        rng.shuffle(bucket)

    def enough() -> bool:
        return len(improvable) >= n_improvable and len(other) >= n_prompts - n_improvable

    def in_turn():  # round-robin over positions so late-episode states are as present as first steps
        while any(by_position.values()):
            for position in positions:
                if by_position[position]:
                    yield by_position[position].pop()

    # the states are scored (every candidate's return) `batch` at a time, across the cores when `where` names the
    # environment, and kept in the same order as one at a time: the rows are the same, whatever the cores
    batch = 8 * workers if where is not None and workers > 1 else 1
    pending = in_turn()
    progress = tqdm(total=n_prompts, desc="corpus/grpo states scored and kept", leave=False)
    while not enough():
        states = list(itertools.islice(pending, batch))
        if not states:
            break
        for (state, observation), returns in zip(
            states, _scored(env, states, reference, reference_policy, where, workers)
        ):
            if enough():
                break
            examined += 1
            if max(returns.values()) - min(returns.values()) < INFORMATIVE_SPREAD:
                continue
            row = _grpo_row(env, state, observation, returns, reference_policy)
            gains = row["best_return"] - row["reference_return"] >= improvable_margin
            (improvable if gains and len(improvable) < n_improvable else other).append((examined, row))
            progress.update(min(len(improvable), n_improvable) + min(len(other), n_prompts - n_improvable) - progress.n)
    progress.close()
    # improvable rows never exceed their quota; when the pool has fewer, other rows fill the remaining places
    chosen_rows = improvable + other[: n_prompts - len(improvable)]
    rows = [row for _, row in sorted(chosen_rows, key=lambda pair: pair[0])]
    stats = {
        "states_seen": seen,
        "states_examined": examined,
        "states_kept": len(rows),
        "improvable_kept": sum(r["best_return"] - r["reference_return"] >= improvable_margin for r in rows),
        "positions": dict(sorted(Counter(r["position"] for r in rows).items())),
    }
    return rows, stats


def _scored_states(env_name: str, env_args: dict | None, reference: str, states: list[tuple]) -> list[dict]:
    """A worker's share of `grpo_rows`: every candidate's return at each (seed, history, observation)."""
    spec = get_spec(env_name, env_args)
    env, policy = spec.make_env(), spec.make_policy(reference)
    return [
        candidate_returns(env, seed, "train", history, observation, policy) for seed, history, observation in states
    ]


def check_hashes(hashes: dict[str, str], expected: dict[str, str] | None) -> list[str]:
    """Raise on a mismatch with expected_hash; without one, return drift warnings to print."""
    if expected is None:
        return [f"corpus hashes are not pinned (corpus.expected_hash unset); this run's: {hashes}"]
    bad = {name: (expected[name], hashes.get(name)) for name in expected if hashes.get(name) != expected[name]}
    if bad:
        raise CorpusHashError(
            "corpus drifted from corpus.expected_hash: "
            + "; ".join(f"{n}: expected {e[:12]}…, got {(g or 'missing')[:12]}…" for n, (e, g) in bad.items())
        )
    return []


def run_corpus(config: RunConfig, run: Run) -> dict:
    started = run.begin("corpus")
    spec = config.spec
    env = spec.make_env()
    out = run.stage_dir("corpus")
    c = config.corpus
    sft_seeds = range(c.seed_offset, c.seed_offset + c.sft_episodes)
    # GRPO draws from later train seeds so RL sees scenarios the teacher never showed.
    grpo_seeds = range(sft_seeds.stop, sft_seeds.stop + max(1, c.grpo_prompts // 2))
    sft = sft_rows(
        spec,
        env,
        tqdm(sft_seeds, desc="corpus/sft episodes"),
        c.sft_noise,
        random.Random(config.seed),
        c.sft_label_smoothing,
        random.Random(f"{config.seed}/label-smoothing"),
        c.sft_policy,
        tuple(c.sft_noise_excluded_kinds),
    )
    grpo, grpo_stats = grpo_rows(
        spec,
        env,
        tqdm(grpo_seeds, desc="corpus/grpo rollouts"),
        list(c.grpo_rollout_policies or (spec.teacher, spec.random)),
        c.grpo_prompts,
        config.reference_policy,
        random.Random(config.seed),
        c.grpo_improvable_share,
        where=(config.env, config.env_args),
        workers=cores(),
    )
    dagger = None
    if c.dagger_from:  # the teacher's labels at an earlier SFT's own states (lib/training/dagger.py)
        extra_rows, dagger = dagger_rows(config, c.dagger_from, dagger_seeds(c.dagger_episodes, c.seed_offset))
        sft += extra_rows
        print(f"corpus dagger: {dagger['rows']} rows from {dagger['from']}'s SFT ({dagger['episodes']} episodes)")
    _write_jsonl(out / "sft.jsonl", sft)
    _write_jsonl(out / "grpo_prompts.jsonl", grpo)
    files = ["sft.jsonl", "grpo_prompts.jsonl"]
    hashes = {name: sha256_file(out / name) for name in files}
    for warning in check_hashes(hashes, c.expected_hash):
        print(f"warning: {warning}")
    run.update_manifest(corpus_hashes=hashes)
    return run.stage_done(
        "corpus",
        started=started,
        params=c.model_dump(mode="json"),
        inputs={"env": config.env, **({"dagger_from": c.dagger_from} if c.dagger_from else {})},
        outputs={name: str(out / name) for name in files},
        metrics={
            "sft_rows": len(sft),
            "dagger": dagger,
            "sft_episodes": c.sft_episodes,
            "grpo_prompts": len(grpo),
            **grpo_stats,
            "hashes": hashes,
        },
    )
