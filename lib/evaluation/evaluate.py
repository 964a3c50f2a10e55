"""Stage `evaluate`: closed-loop evaluation of the untrained, SFT and GRPO models and every baseline and trivial
policy on holdout, holdout_novel and a train sample, the model acting at every step.

`python -m lib stage evaluate --run-dir outputs/<id>`; notebook 05_evaluate calls `run_evaluate`. Writes
`evaluate/eval.json` (summaries, paired-by-seed differences, ablations, the `improved` verdict) and
`evaluate/episodes.jsonl` (every episode with every action and the `model_source` that produced it).
Provenance is checked before anything is written: a model action without a source, or from any source other
than the artifact under evaluation (a planted fallback), fails the stage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..candidates import tally_tokens
from ..config import rl_label
from ..inference import load_policy_model
from ..io import atomic_write_json, atomic_write_text
from ..models import is_tiny
from ..runs import quickcheck_path, seed_everything
from ..stats import gap_closure, paired_difference
from .ablations import run_ablations
from .antihack import build_report
from .closed_loop import (
    check_provenance,
    episode_records,
    model_artifacts,
    returns_by_seed,
    roles,
    run_model_episodes,
    sft_model_dir,
    split_seeds,
    summarize,
)
from .scripted import run_policies, run_policy_episodes

MODEL_POLICIES = ("untrained", "sft", "grpo")


def _paired(returns: dict[str, dict[int, float]], role: dict[str, str], resamples: int, scripted=()) -> dict:
    """GRPO - SFT, GRPO - teacher and SFT - teacher, paired by seed, keys naming roles ("grpo-teacher"); then GRPO -
    each scripted policy in `scripted` other than the teacher, keys naming the policy ("grpo-evidence_expert")."""
    named = {**returns, **{r: returns[name] for r, name in role.items() if name in returns}}
    pairs = [(a, b, a, b) for a, b in (("grpo", "sft"), ("grpo", "teacher"), ("sft", "teacher"))]
    pairs += [("grpo", name, "grpo", name) for name in scripted if name != role["teacher"]]
    return {
        f"{key_a}-{key_b}": paired_difference(named[a], named[b], resamples=resamples)
        for a, b, key_a, key_b in pairs
        if a in named and b in named
    }


def baseline_pair(name: str, role: dict[str, str]) -> str:
    """The key of GRPO - `name` under a split's `paired`: the teacher's pair is named by its role."""
    return "grpo-teacher" if name == role["teacher"] else f"grpo-{name}"


def baselines_beaten(splits: dict, role: dict[str, str]) -> dict:
    """Per held-out split: the scripted policies (the oracle aside, which reads what no prompt shows) that the RL
    policy beats, its paired difference's 95% CI above zero, and those it does not, each list in eval.json's order."""
    verdict = {}
    for split, entry in splits.items():
        if split == "train" or "grpo" not in entry["policies"]:
            continue
        names = [
            name
            for name, p in entry["policies"].items()
            if p["kind"] in ("baseline", "trivial")
            and name != role["oracle"]
            and baseline_pair(name, role) in entry["paired"]
        ]
        beaten = [n for n in names if entry["paired"][baseline_pair(n, role)]["ci95"][0] > 0]
        verdict[split] = {"beats": beaten, "does_not_beat": [n for n in names if n not in beaten]}
    return verdict


def _evaluate_split(config, run, loaded: dict, baseline_names: list[str], split: str, records: list[dict]):
    """One split: every model, every baseline and the improver on the split's seeds (their episode records appended
    to `records`); returns the split's entry of eval.json and each policy's return by seed."""
    spec, resamples = config.spec, config.eval.bootstrap_resamples
    role = roles(spec)
    seeds = split_seeds(config, split)
    summaries, returns = {}, {}

    def add(name: str, kind: str, episodes, actions) -> None:
        summaries[name] = {"kind": kind, **summarize(episodes, actions, resamples)}
        returns[name] = returns_by_seed(episodes)
        records.extend(episode_records(name, episodes, actions))

    for name, entry in loaded.items():
        played = seeds[: config.eval.untrained_episodes or len(seeds)] if name == "untrained" else seeds
        with run.lap("evaluate", f"{split}: {name}"):
            add(name, "model", *run_model_episodes(config, entry, played, split, desc=f"evaluate/{split}/{name}"))
    improver_seeds = seeds[: config.eval.improver_episodes or len(seeds)]
    jobs = [(name, list(seeds)) for name in baseline_names] + [(role["improver"], list(improver_seeds))]
    with run.lap("evaluate", f"{split}: scripted policies"):
        played = run_policies(config.env, config.env_args, jobs, split)  # across the machine's cores
    for name in baseline_names:
        add(name, spec.policy_kind(name), *played[name])
    add(role["improver"], "reference", *played[role["improver"]])
    paired = _paired(returns, role, resamples, baseline_names)
    entry = {"seeds": [seeds.start, seeds.stop], "policies": summaries, "paired": paired}
    for key, target in (("gap_closure", role["oracle"]), ("gap_closure_improver", role["improver"])):
        if {"grpo", role["teacher"], target} <= set(returns):
            entry[key] = gap_or_error(returns["grpo"], returns[role["teacher"]], returns[target], resamples=resamples)
    return entry, returns


def _verdict(config, splits: dict, role: dict[str, str]) -> dict:
    """eval.json's claims, each read off the holdout pairs (and, for the baselines, every held-out split's)."""
    holdout = splits.get("holdout", {}).get("paired", {})
    grpo_sft = holdout.get("grpo-sft", {"ci95": [0, 0]})
    grpo_teacher = holdout.get("grpo-teacher", {"ci95": [0, 0]})
    baselines = baselines_beaten(splits, role)
    return {
        "improved": grpo_sft["ci95"][0] > 0,
        "beats_teacher": grpo_teacher["ci95"][0] > 0,
        "baselines": baselines,
        "beats_every_baseline": bool(baselines) and not any(v["does_not_beat"] for v in baselines.values()),
        "rule": f"improved: {rl_label(config)} - SFT (grpo-sft) on holdout, paired-by-seed bootstrap 95% CI lower "
        f"bound > 0; beats_teacher: the same for {rl_label(config)} - teacher ({role['teacher']}); "
        f"beats_every_baseline: the same for {rl_label(config)} - every scripted policy but the oracle "
        f"({role['oracle']}, which reads hidden state), on every held-out split (baselines: who is beaten where)",
    }


def run_evaluate(config, run, *, policies: list[str] | None = None) -> dict:
    """The evaluate stage. `policies` narrows the baseline list (tests); models are always evaluated."""
    started = run.begin("evaluate")
    seed_everything(config.seed, config.deterministic)
    out = run.stage_dir("evaluate")
    resamples = config.eval.bootstrap_resamples
    spec = config.spec
    role = roles(spec)
    baseline_names = policies or list(spec.reported_policies)
    records: list[dict] = []
    splits: dict[str, dict] = {}
    returns: dict[str, dict[str, dict[int, float]]] = {split: {} for split in config.eval.splits}
    with run.lap("evaluate", "model load"):
        loaded = {
            name: load_policy_model(where["model"], config.model, where["adapter"])
            for name, where in model_artifacts(config, run).items()
        }
    for split in config.eval.splits:
        splits[split], returns[split] = _evaluate_split(config, run, loaded, baseline_names, split, records)
    with run.lap("evaluate", "ablations"):
        ablations = run_ablations(config, run, loaded, returns.get("holdout", {}), records, resamples)
    sources = {name: entry[2] for name, entry in loaded.items()}
    check_provenance(records, sources)

    verdict = _verdict(config, splits, role)
    gaps = {
        name: splits["train"]["policies"][name]["mean_return"] - splits["holdout"]["policies"][name]["mean_return"]
        for name in MODEL_POLICIES
        if "train" in splits and "holdout" in splits
    }
    sft_stage, grpo_stage = run.read_stage("sft"), run.read_stage("grpo")
    report = {
        "env": config.env,
        "profile": config.profile,
        "decoding": "greedy",
        "roles": role,
        "backends": {"sft": sft_stage["metrics"]["backend"], "grpo": grpo_stage["metrics"]["backend"]},
        "artifacts": sources,
        "splits": splits,
        "ablations": ablations,
        "train_holdout_gap": gaps,
        **verdict,
    }
    episodes_path = out / "episodes.jsonl"
    with run.lap("evaluate", "records and anti-hacking report"):
        atomic_write_text(episodes_path, "".join(json.dumps(r) + "\n" for r in records))
        atomic_write_json(out / "eval.json", report)
        anti = build_report(config, run, report)
        atomic_write_json(out / "anti_hacking_report.json", anti)
    holdout_policies = splits.get("holdout", {}).get("policies", {})
    return run.stage_done(
        "evaluate",
        started=started,
        params=config.eval.model_dump(),
        inputs={"sft": sources["sft"]["path"], "grpo": sources["grpo"]["path"]},
        outputs={
            "eval.json": str(out / "eval.json"),
            "episodes.jsonl": str(episodes_path),
            "anti_hacking_report.json": str(out / "anti_hacking_report.json"),
        },
        metrics={
            "improved": verdict["improved"],
            "beats_teacher": verdict["beats_teacher"],
            "beats_every_baseline": verdict["beats_every_baseline"],
            "all_attacks_passed": anti["all_attacks_passed"],
            **{f"holdout/{k}": v["mean_return"] for k, v in holdout_policies.items()},
            "episode_records": len(records),
        },
    )


def quick_check(config, run, episodes: int = 200, split: str = "holdout", models=("sft", "grpo")) -> dict:
    """Closed-loop check after training: SFT and GRPO act at every step of `episodes` episodes, compared
    paired-by-seed with the environment's random, teacher and oracle policies (gap closure), next to GRPO's exploration
    record. `models` ("grpo" alone) leaves the SFT model out, for a fork whose SFT its base already checked; the
    differences that need it are left out. Writes quickcheck.json (holdout) or quickcheck_<split>.json."""
    unknown = set(models) - {"sft", "grpo"}
    if unknown or "grpo" not in models:
        raise ValueError(f"quickcheck plays the run's grpo model, optionally its sft model; got {list(models)}")
    seeds = range(episodes)
    artifacts = model_artifacts(config, run)
    returns: dict[str, dict[int, float]] = {}
    summary = {}
    for name in models:
        loaded = load_policy_model(artifacts[name]["model"], config.model, artifacts[name]["adapter"])
        runs = run_model_episodes(config, loaded, seeds, split, desc=f"quickcheck/{name}")
        summary[name] = summarize(*runs)
        returns[name] = returns_by_seed(runs[0])
    role = roles(config.spec)
    jobs = [(name, list(seeds)) for name in dict.fromkeys(role.values())]  # a name in two roles plays once
    played = run_policies(config.env, config.env_args, jobs, split)
    for name, runs in played.items():
        summary[name] = summarize(*runs)
        returns[name] = returns_by_seed(runs[0])
    grpo = run.read_stage("grpo")["metrics"]
    teacher = returns[role["teacher"]]
    report = {
        "split": split,
        "episodes": episodes,
        "roles": role,
        "policies": summary,
        "paired": {
            **(
                {
                    "grpo-sft": paired_difference(returns["grpo"], returns["sft"]),
                    "sft-random": paired_difference(returns["sft"], returns[role["random"]]),
                }
                if "sft" in returns
                else {}
            ),
            "grpo-teacher": paired_difference(returns["grpo"], teacher),
        },
        "gap_closure": gap_closure(returns["grpo"], teacher, returns[role["oracle"]]),
        "gap_closure_improver": gap_closure(returns["grpo"], teacher, returns[role["improver"]]),
        "grpo_frac_reward_zero_std_mean": grpo["frac_reward_zero_std_mean"],
        "grpo_explore": {k: v for k, v in grpo.items() if k.startswith("explore/")},
        "returns": {name: {str(seed): value for seed, value in r.items()} for name, r in returns.items()},
    }
    atomic_write_json(quickcheck_path(run.dir, split), report)
    return report


def sft_check(
    config, run, episodes: int = 200, split: str = "holdout", vs: Path | None = None, logit_adjust: float = 0.0
) -> dict:
    """The SFT model alone against its teacher, closed loop on `episodes` seeds of `split`, paired by seed: how close
    imitation came, what it cost (the sft stage's seconds) and which actions it played (the teacher's count beside).
    Needs only the sft stage, so a learner can be judged before any GRPO. With `vs` (another run checked the same
    way) it also gives this SFT - that run's SFT, paired by seed: one lever against its baseline arm. The oracle plays
    the same seeds, so the report's gap closure says how far from the teacher toward the oracle this SFT came: for the
    capacity check (improver labels), how much room a learner of this kind could reach at all, on the scale GRPO's
    gap closure uses. Writes sft/check_<split>.json, per-seed returns included.

    `logit_adjust` tau > 0 (an SFT trained with `sft.kind_balance`) plays the SFT model with tau * log(trained share /
    corpus share) of each candidate's kind taken off its score, and writes sft/check_<split>_la<tau>.json instead:
    the resampling's shift in prior undone in part (tau < 1) or whole, with no retraining."""
    from collections import Counter

    from ..envs.base import completion_action

    sft = run.read_stage("sft")
    model_dir = sft_model_dir(run)
    baseline = _checked_returns(Path(vs), config.env, split) if vs is not None else None
    shift = None
    if logit_adjust:
        from ..stats import kind_log_weights

        if not 0.0 < logit_adjust <= 1.0:
            raise ValueError(f"logit_adjust {logit_adjust}: tau must lie in [0, 1]")
        shift = {k: logit_adjust * w for k, w in kind_log_weights(sft["metrics"].get("kind_mix")).items()}
    loaded = load_policy_model(model_dir, config.model)
    began = time.perf_counter()
    with tally_tokens() as tokens:  # what playing cost: the prompt tokens computed per state, and the seconds
        model_episodes, model_actions = run_model_episodes(
            config, loaded, range(episodes), split, desc="sft-check", kind_shift=shift
        )
    tokens = {**tokens, "seconds": round(time.perf_counter() - began, 1)}  # the Counter, a plain dict
    teacher_name = config.spec.teacher
    teacher_episodes, teacher_actions = run_policy_episodes(config.spec, teacher_name, range(episodes), split)
    oracle_episodes, _ = run_policy_episodes(config.spec, config.spec.oracle, range(episodes), split)
    sft_returns = returns_by_seed(model_episodes)
    teacher_returns = returns_by_seed(teacher_episodes)
    played = Counter(completion_action(a["completion"]) for a in model_actions)
    report = {
        "env": config.env,
        "split": split,
        "episodes": episodes,
        "teacher": teacher_name,
        # the learner: which model, the layers it keeps, the precision it ran in, and whose labels it learned
        "learner": {
            "model": config.model.name,
            "lora_top_layers": None if is_tiny(config.model) else config.model.lora.top_layers,
            "precision": sft["metrics"].get("precision", "fp32"),
            "labels": config.corpus.sft_policy or teacher_name,
            "list_candidates": config.env_args.get("list_candidates", True),
            "turns": config.env_args.get("turns", "state"),
        },
        "sft_seconds": sft.get("duration_s"),
        "play": {**tokens, "computed_per_state": round(tokens["computed_prompt_tokens"] / max(tokens["states"], 1), 1)},
        "logit_adjust": {"tau": logit_adjust, "shift": {k: round(v, 4) for k, v in shift.items()}} if shift else None,
        "policies": {
            "sft": summarize(model_episodes, model_actions),
            teacher_name: summarize(teacher_episodes, teacher_actions),
        },
        "sft-teacher": paired_difference(sft_returns, teacher_returns),
        "oracle": config.spec.oracle,
        "gap_closure": gap_or_error(sft_returns, teacher_returns, returns_by_seed(oracle_episodes)),
        "distinct_actions": len(played),
        "teacher_distinct_actions": len({completion_action(a["completion"]) for a in teacher_actions}),
        "top_actions": played.most_common(5),
        "imitation": sft["metrics"].get("imitation"),
        "sft_returns": {str(seed): value for seed, value in sorted(sft_returns.items())},
    }
    if baseline is not None:
        report["vs"] = {"run": str(vs), "sft-vs": paired_difference(sft_returns, baseline)}
    atomic_write_json(Path(run.dir) / "sft" / check_file(split, logit_adjust), report)
    return report


def check_file(split: str, logit_adjust: float = 0.0) -> str:
    """The file name of an sft-check on `split`, at a logit adjustment tau (0: none).

    >>> check_file("holdout"), check_file("holdout", 0.5)
    ('check_holdout.json', 'check_holdout_la0.5.json')
    """
    return f"check_{split}.json" if not logit_adjust else f"check_{split}_la{logit_adjust:g}.json"


def gap_or_error(policy: dict, teacher: dict, target: dict, resamples: int = 2000) -> dict:
    """`policy`'s gap closure from the teacher toward `target`, or an `error` entry where the target does not beat
    the teacher on these seeds (no headroom: nothing to close), so the report around it is still written."""
    try:
        return gap_closure(policy, teacher, target, resamples=resamples)
    except ValueError as error:
        return {"error": str(error)}


def _checked_returns(run_dir: Path, env: str, split: str) -> dict[int, float]:
    """The per-seed SFT returns of another run's sft-check on `split`, for pairing; a clear error when that check
    is missing, older than per-seed returns, or of another environment."""
    path = run_dir / "sft" / f"check_{split}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no sft-check there; run python -m lib sft-check --run-dir {run_dir} first")
    check = json.loads(path.read_text())
    if check.get("env") != env:
        raise ValueError(f"{path}: a check on {check.get('env')!r}, not on {env!r}; arms pair within one environment")
    if "sft_returns" not in check:
        raise ValueError(f"{path}: written before checks kept per-seed returns; run sft-check on that run again")
    return {int(seed): value for seed, value in check["sft_returns"].items()}
