"""`python -m lib replay record --run-dir R`: the trained policy's evaluated actions, written to R/replay.jsonl, so
the server can show that policy (as `grpo`) without loading a model.

Each line is one action: env, split, seed, step, the answer text, and the artifact (path and sha256) that chose it. They
come from the evaluate stage's `evaluate/episodes.jsonl` (the very actions the evaluation scored; a committed run keeps
it gzipped beside its name); a run without that file (the committed reference runs leave it out for size) has its GRPO
model play the evaluation's seeds again, which needs the run's weights. Either way every recorded episode is replayed
through a fresh environment before the file is written, and a return that differs from the recorded one is an error.

`ReplayPolicy` plays a recorded episode back; a seed the replay does not hold falls back to the teacher and
every such step says `replay_miss`. A `Replay` plays in the environment it is given (an `EnvSpec`: the run's
`config.spec`, or what the server serves).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..envs import EnvSpec
from ..envs.base import Policy
from ..episodes import run_episode
from ..io import atomic_write_text, stored_bytes, stored_path
from ..runs import read_config, read_stage_record

REPLAY_FILE = "replay.jsonl"
REPLAYED = "grpo"  # the policy a replay holds, and the name the server shows it under


class ReplayError(RuntimeError):
    """A replay that cannot be recorded or read: missing inputs, a damaged line, or a return that differs."""


def _from_episodes_file(path: Path) -> tuple[list[dict], dict]:
    records, returns = [], {}
    for number, line in enumerate(stored_bytes(path).decode("utf-8").splitlines(), 1):
        try:
            episode = json.loads(line)
        except json.JSONDecodeError as error:
            raise ReplayError(f"{path}:{number}: not JSON ({error})") from None
        if episode.get("policy") != REPLAYED or "ablation" in episode:  # the greedy evaluation, not an ablation
            continue
        returns[(episode["split"], episode["seed"])] = episode["return"]
        for action in episode["actions"]:
            records.append(
                {
                    "split": episode["split"],
                    "seed": episode["seed"],
                    "step": action["step"],
                    "action": action["completion"],
                    "artifact": action["model_source"],
                }
            )
    return records, returns


def _from_model(run_dir: Path, config) -> tuple[list[dict], dict]:
    from ..evaluation.closed_loop import model_artifacts, run_model_episodes, split_seeds
    from ..inference import load_policy_model
    from ..runs import Run

    entry = model_artifacts(config, Run(run_dir, config))[REPLAYED]
    if not Path(entry["adapter"]).exists():
        raise ReplayError(f"{run_dir}: no evaluate/episodes.jsonl, and no GRPO weights at {entry['adapter']}")
    loaded = load_policy_model(entry["model"], config.model, entry["adapter"])
    records, returns = [], {}
    for split in config.eval.splits:
        episodes, actions = run_model_episodes(
            config, loaded, split_seeds(config, split), split, desc=f"replay/{split}"
        )
        returns.update({(split, e.seed): e.episode_return for e in episodes})
        records += [
            {"split": a["split"], "seed": a["seed"], "step": a["step"], "action": a["completion"]}
            | {"artifact": a["model_source"]}
            for a in actions
        ]
    return records, returns


def record(run_dir: Path | str) -> dict:
    """Write R/replay.jsonl (see the module docstring); returns a summary: episodes, actions, source."""
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    read_stage_record(run_dir, "grpo")  # a clear error when the run has no finished GRPO stage
    episodes_file = run_dir / "evaluate" / "episodes.jsonl"
    if stored_path(episodes_file) is not None:  # or gzipped beside its name, as a committed run keeps it
        records, returns, source = *_from_episodes_file(episodes_file), "evaluate/episodes.jsonl"
    else:
        records, returns = _from_model(run_dir, config)
        source = "the GRPO model, played again"
    if not records:
        raise ReplayError(f"{run_dir}: no {REPLAYED!r} actions to record")
    for item in records:
        item["env"] = config.env
    replay = Replay(config.spec, records)
    mismatches = [
        f"{split}/{seed}: recorded {expected:.6f}, replayed {replay.play(split, seed)['episode_return']:.6f}"
        for (split, seed), expected in sorted(returns.items())
        if abs(replay.play(split, seed)["episode_return"] - expected) > 1e-9
    ]
    if mismatches:
        raise ReplayError(f"{len(mismatches)} replayed returns differ from the evaluated ones: {mismatches[:5]}")
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    atomic_write_text(run_dir / REPLAY_FILE, text)
    return {"episodes": len(returns), "actions": len(records), "source": source, "path": str(run_dir / REPLAY_FILE)}


def load(run_dir: Path | str, spec: EnvSpec) -> Replay:
    """The replay of a run (R/replay.jsonl), played in environment `spec`; a damaged line is an error naming it."""
    path = Path(run_dir) / REPLAY_FILE
    if not path.exists():
        raise ReplayError(f"{path} does not exist: python -m lib replay record --run-dir {run_dir}")
    records = []
    for number, line in enumerate(stored_bytes(path).decode("utf-8").splitlines(), 1):
        try:
            item = json.loads(line)
            if not isinstance(item, dict) or not {"env", "split", "seed", "step", "action", "artifact"} <= set(item):
                raise ValueError("a record needs env, split, seed, step, action and artifact")
        except ValueError as error:
            raise ReplayError(f"{path}:{number}: damaged replay line ({error})") from None
        records.append(item)
    envs = {r["env"] for r in records}
    if len(envs) != 1:
        raise ReplayError(f"{path}: a replay holds one environment, found {sorted(envs)}")
    return Replay(spec, records)


class Replay:
    """Recorded actions by (split, seed, step), played in environment `spec`."""

    def __init__(self, spec: EnvSpec, records: list[dict]):
        self.spec = spec
        self.actions = {(r["split"], r["seed"], r["step"]): r for r in records}
        self.seeds = {(r["split"], r["seed"]) for r in records}
        artifacts = {json.dumps(r["artifact"], sort_keys=True) for r in records}
        self.artifacts = [json.loads(a) for a in sorted(artifacts)]

    def policy(self) -> ReplayPolicy:
        return ReplayPolicy(self)

    def play(self, split: str, seed: int) -> dict:
        """One whole episode of the replayed policy (`lib.episodes.run_episode`): its return, and how many steps
        missed the replay."""
        policy = self.policy()
        episode = run_episode(self.spec.make_env(), policy, seed, split)
        return {"episode_return": episode.episode_return, "misses": policy.misses}


class ReplayPolicy(Policy):
    """Acts as the replay recorded; at a (split, seed, step) it does not hold, as the environment's teacher, with
    `last_miss` set and `misses` counted."""

    name = REPLAYED

    def __init__(self, replay: Replay):
        self.replay = replay
        self.teacher = replay.spec.make_policy(replay.spec.teacher)
        self.misses = 0
        self.last_miss = False

    def begin(self, seed: int) -> None:
        self.teacher.begin(seed)
        self.misses, self.last_miss = 0, False

    def act(self, observation, env) -> str:
        teacher_answer = self.teacher.act(observation, env)  # keeps the teacher's own state in step either way
        recorded = self.replay.actions.get((env.split, env.seed, len(env.history) + 1))
        self.last_miss = recorded is None
        if recorded is None:
            self.misses += 1
            return teacher_answer
        return recorded["action"]
