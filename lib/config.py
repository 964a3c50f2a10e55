"""The one run configuration: a pydantic `RunConfig` (unknown keys rejected) loaded from lib/profiles/*.yaml.

Used by every stage (`python -m lib stage ...`, `python -m lib run ...`) and every notebook's parameters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

# the sections, re-exported: lib.config is where callers find them
from .config_sections import (  # noqa: F401
    AggrevateStageConfig,
    CorpusConfig,
    EvalConfig,
    ExportConfig,
    GRPOStageConfig,
    LoraConfig,
    ModelConfig,
    RLStageConfig,
    SFTStageConfig,
    Strict,
    TinyModelConfig,
)

if TYPE_CHECKING:
    from .envs.spec import EnvSpec

PROFILES_DIR = Path(__file__).parent / "profiles"


class RunConfig(Strict):
    profile: str
    env: str = Field(description="an environment package under lib/envs/ or a dotted module path defining SPEC")
    env_args: dict[str, Any] = Field(
        {},
        description="arguments of the environment (its module's make_spec), e.g. {tasks: path.jsonl} for one that "
        "reads a tasks file (a relative path is read from the folder the stage runs in: the repository root for "
        "notebooks and `python -m lib`); every process of the run builds the environment with them",
    )
    seed: int = 0
    deterministic: bool = True
    output_root: str = "outputs"
    tracking: Literal["none", "tensorboard", "trackio"] = Field(
        "none",
        description="experiment tracking, passed to TRL's report_to for the sft and grpo stages: none; tensorboard "
        "(event files under <run>/<stage>/trainer/runs/, `tensorboard --logdir outputs/ID`); trackio (a local "
        "dashboard, `trackio show`; never a Space: nothing leaves the machine). Each needs its package installed",
    )
    corpus: CorpusConfig
    model: ModelConfig
    sft: SFTStageConfig
    rl: RLStageConfig = RLStageConfig()
    grpo: GRPOStageConfig
    aggrevate: AggrevateStageConfig = AggrevateStageConfig()
    eval: EvalConfig
    export: ExportConfig = ExportConfig()

    @property
    def spec(self) -> EnvSpec:
        """The run's environment: `lib.envs.get_spec(env, env_args)` (memoised there, so this is cheap)."""
        from .envs import get_spec

        return get_spec(self.env, self.env_args)

    @property
    def reference_policy(self) -> str:
        """The policy that finishes episodes in the GRPO reward: grpo.reference_policy, else the env's teacher."""
        return self.grpo.reference_policy or self.spec.teacher

    @field_validator("env")
    @classmethod
    def _registered(cls, name: str) -> str:
        from .envs import get_spec

        get_spec(name)  # raises, listing the known environments
        return name

    @model_validator(mode="after")
    def _known_to_the_environment(self):
        """The environment builds with env_args (a bad argument, or a bad file it names, is an error here), and
        every policy the config names is one it defines. Nothing outside the config changes."""
        spec = self.spec
        named = {
            "grpo.reference_policy": [self.grpo.reference_policy] if self.grpo.reference_policy else [],
            "corpus.grpo_rollout_policies": self.corpus.grpo_rollout_policies or [],
            "corpus.sft_policy": [self.corpus.sft_policy] if self.corpus.sft_policy not in (None, "improver") else [],
        }
        for key, names in named.items():
            unknown = sorted(set(names) - set(spec.policies))
            if unknown:
                raise ValueError(f"{key}: {unknown} are not policies of {self.env!r} (it has {sorted(spec.policies)})")
        if self.env_args.get("list_candidates") is False and self.model.action_space != "candidates":
            raise ValueError(
                "env_args.list_candidates: false leaves the candidate list out of the prompt; a model that writes its "
                "answer (model.action_space: free) needs it: set model.action_space: candidates"
            )
        self._rl_settings_fit()
        return self

    def _rl_settings_fit(self) -> None:
        """The RL stage's settings across its sections (rl, grpo, aggrevate) fit together."""
        rl, g = self.rl, self.grpo
        if self.aggrevate.rounds > 1 and rl.algorithm != "aggrevate":
            raise ValueError(
                f"aggrevate.rounds ({self.aggrevate.rounds}) counts AggreVaTe rounds; it needs rl.algorithm aggrevate "
                f"(is {rl.algorithm})"
            )
        if rl.algorithm == "aggrevate" and self.model.action_space != "candidates":
            raise ValueError(
                "rl.algorithm: aggrevate labels the candidate the policy chose; it needs model.action_space: candidates"
            )
        if g.mode == "soft_target" and g.temperature != 1:
            raise ValueError(
                f"grpo.mode: soft_target moves the policy itself toward its target; TRL's loss divides the logits by "
                f"grpo.temperature ({g.temperature}), which would move another distribution: set it to 1"
            )
        if g.mode != "step" and self.model.action_space != "candidates":
            raise ValueError(
                f"grpo.mode: {g.mode} acts through the candidate policy; it needs model.action_space: candidates"
            )


class ConfigError(ValueError):
    """A profile or override is malformed; the message names every offending key."""


# Settings removed from the config: dotted key -> (the value that meant what the code does now, where the evidence
# is). A new config naming one is a ConfigError pointing there. A run made before the removal still reads, replays
# and gates: its manifest is a record, so `lib.runs.manifest_config` drops these keys (the file keeps them), and a
# stage is re-run on such a run only if each one holds its neutral value (`retired_in`).
RESULTS_LEVERS = "docs/RESULTS.md, the lever index at its head"
RETIRED: dict[str, tuple[Any, str]] = {
    "corpus.extras": ([], "removed in b2c7137: nothing consumed the extras"),
    "corpus.extras_cache_dir": ("outputs/.extras_cache", "removed with corpus.extras"),
    "corpus.hf_instruction_dataset": (None, f"SFT never read those rows ({RESULTS_LEVERS})"),
    "corpus.hf_instruction_rows": (200, f"SFT never read those rows ({RESULTS_LEVERS})"),
    "corpus.sft_label": (
        "teacher",
        "cloning the noisy teacher's executed actions left the SFT unable to copy the drug number (0.017): "
        "docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but nothing beats the teacher yet'",
    ),
    "sft.candidate_loss": (
        0.0,
        "on SENTINEL trust it gained what sft.prompt_loss gains (+0.003 [-0.004, +0.008] over it) at 1.9-3.1x the SFT "
        "time: docs/RESULTS.md, '2026-11-26 (night)'; retired for grpo.anchor",
    ),
    "model.tiny.split_digits": (
        False,
        "digit tokens lost 0.01 on two seeds: docs/RESULTS.md, '2026-11-26 (evening): an imitation check in the SFT "
        "stage; digit tokens on SENTINEL trust'",
    ),
    "grpo.top_k": (
        0,
        "temperature 3 with top_k 2 gave +0.003 [0.000, +0.008]: docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but "
        "nothing beats the teacher yet'",
    ),
    "grpo.target_kl": (
        0.1,
        "soft_target's bound at 0.5 lost -0.034 [-0.057, -0.011] against 0.1 and fell from step 20: docs/RESULTS.md, "
        "'Soft targets bounded by a KL'; the bound is lib/training/rollout.py's TARGET_KL",
    ),
    "grpo.max_grad_norm": (
        1.0,
        "clipping at 0.2 kept the same checkpoints on both seeds: docs/RESULTS.md, '(...) gradient clipping "
        "does not hold the fall'",
    ),
    "grpo.epsilon_high": (
        None,
        "clip-higher never binds at one iteration per batch (identical to its base arm): docs/RESULTS.md, 'Levers, "
        "one at a time on the same SFT weights and seeds'",
    ),
    "grpo.entropy_coef": (
        0.0,
        "a token-entropy bonus moved nothing (identical to its base arm): docs/RESULTS.md, 'Levers, one at a time "
        "on the same SFT weights and seeds'",
    ),
    "grpo.use_adaptive_entropy": (False, "retired with grpo.entropy_coef"),
    "grpo.entropy_target": (0.2, "retired with grpo.entropy_coef"),
    "corpus.grpo_improvable_margin": (
        0.05,
        "a margin of 0.2 gave GRPO 0.538, as 0.05 did: docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but nothing "
        "beats the teacher yet'",
    ),
    "grpo.continuation": (
        "reference",
        "the policy finishing its own episodes did worse than the teacher finishing them (-0.133 against -0.107 "
        "GRPO - SFT): docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but nothing beats the teacher yet'",
    ),
    "grpo.shared_prompt_pass": (
        True,
        "an exact rewrite of TRL's loss pass, not a lever (4.2x a step on a CPU, the same log-probabilities): it "
        "runs on a CPU, not on a GPU (slower there) nor with grpo.gradient_checkpointing true. docs/RESULTS.md, "
        "'2026-11-28 (midday)'",
    ),
    "model.keep_layers": (
        None,
        "SmolLM2 cut to 10 or 16 layers started SFT at an answer loss of 30 against 2.07 whole, and no subset of its "
        "layers did better than 11.7: docs/RESULTS.md, '2026-11-27 (before midnight)'",
    ),
    "grpo.train_turns": (
        "all",
        "training one drawn turn per episode trained 96 of 656 played turns in 241 CPU s where every turn trained 650 "
        "of 659 in 154 s: docs/RESULTS.md, '2026-11-26: learning per CPU-minute'; retired for sft.group_by_length",
    ),
    "grpo.improver_margin": (
        0.0,
        "now the improver's own FUTURE_MARGIN, 0.01 where outcomes are drawn (trust seed 0: validation 0.708 against "
        "0.539 without): docs/RESULTS.md, '2026-11-29 (evening)'",
    ),
    "grpo.turn_weight": (
        "episode",
        "a tie with the default (+0.000 paired): docs/RESULTS.md, 'Weighting the turns: episode (mean_T / T) "
        "against turn (1), paired, seed 0'",
    ),
    "grpo.beta": (
        0.0,
        "0.04 on 5 seeds: every curve ends within 0.05 of its best, but seed 3 -0.036 [-0.056, -0.018]; the rest "
        "within noise: docs/RESULTS.md, '2026-11-26 (evening): KL to the SFT policy steadies multi-turn GRPO, and "
        "takes its one win away'",
    ),
    "grpo.anchor": (
        "sft",
        "`best` - `sft`: -0.000 [-0.002, +0.001] (tiny model, seed 0, multi-turn, beta 0.04); what the KL term "
        "held the policy to, retired with grpo.beta: docs/RESULTS.md, '2026-11-27 (before midnight)'",
    ),
}


def _lookup(data: dict, dotted: str):
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


_ABSENT = object()


def retired_in(data: dict) -> dict[str, Any]:
    """The retired settings a config mapping (a manifest's `config`) names with other than their neutral value:
    what that run did and the code no longer can."""
    found = {}
    for dotted, (neutral, _) in RETIRED.items():
        value = _lookup(data, dotted)
        if value is not _ABSENT and value != neutral:
            found[dotted] = value
    return found


def drop_retired(data: dict) -> dict:
    """A copy of a config mapping without its retired keys (a manifest read as a record)."""
    data = json.loads(json.dumps(data))
    for dotted in RETIRED:
        parent, leaf = dotted.rsplit(".", 1)
        node = _lookup(data, parent)
        if isinstance(node, dict):
            node.pop(leaf, None)
    return data


# The RL stage's settings that lived in the grpo section until rl.algorithm was introduced (`grpo.mode: aggrevate`
# named the algorithm then): old key -> its key now. A run made before still reads, replays and gates
# (`migrate_config`); a new config naming an old key is a ConfigError naming the new one.
MOVED: dict[str, str] = {
    "grpo.validate_every": "rl.validate_every",
    "grpo.validation_episodes": "rl.validation_episodes",
    "grpo.keep": "rl.keep",
    "grpo.alarm_drop": "rl.alarm_drop",
    "grpo.stop_on_alarm": "rl.stop_on_alarm",
    "grpo.rounds": "aggrevate.rounds",
}


def migrate_config(data: dict) -> dict:
    """A recorded config mapping (a manifest's `config`, or a stage record's params as {section: params}) in today's
    layout, as a copy: the RL stage's settings moved out of the grpo section (`MOVED`; `grpo.mode: aggrevate` becomes
    `rl.algorithm: aggrevate`, any other grpo.mode `rl.algorithm: grpo`), and the retired settings dropped
    (`drop_retired`; the file keeps them). Every reader of a recorded config goes through it; a mapping already in
    today's layout only loses its retired keys."""
    data = drop_retired(data)
    grpo = data.get("grpo")
    if not isinstance(grpo, dict) or "rl" in data:
        return data
    for old, new in MOVED.items():
        leaf, (section, key) = old.split(".")[1], new.split(".")
        if leaf in grpo:
            data.setdefault(section, {})[key] = grpo.pop(leaf)
    rl = data.setdefault("rl", {})
    rl["algorithm"] = "aggrevate" if grpo.get("mode") == "aggrevate" else "grpo"
    if grpo.get("mode") == "aggrevate":
        del grpo["mode"]
    return data


def _refuse_moved(data: dict, source: str) -> None:
    """A new config that names a setting in the grpo section where it no longer lives: a ConfigError naming the new
    key (old runs' records are migrated instead: `migrate_config`)."""
    lines = [
        f"  {old}: moved to {new} (the settings every RL algorithm shares live in rl, AggreVaTe's own in aggrevate)"
        for old, new in MOVED.items()
        if _lookup(data, old) is not _ABSENT
    ]
    if _lookup(data, "grpo.mode") == "aggrevate":
        lines.append(
            "  grpo.mode: aggrevate is not a GRPO mode any more: AggreVaTe is an RL algorithm of its own; set "
            "rl.algorithm=aggrevate (its rounds: aggrevate.rounds)"
        )
    if lines:
        raise ConfigError(f"invalid config from {source}:\n" + "\n".join(lines))


def rl_label(config: RunConfig | dict) -> str:
    """The RL stage's name in reports, charts and the gate's texts: "RL (GRPO)" or "RL (AggreVaTe)", from a
    RunConfig or a recorded config mapping (migrated here)."""
    if isinstance(config, dict):
        algorithm = migrate_config(config).get("rl", {}).get("algorithm", "grpo")
    else:
        algorithm = config.rl.algorithm
    return f"RL ({ALGORITHM_NAMES[algorithm]})"


ALGORITHM_NAMES = {"grpo": "GRPO", "aggrevate": "AggreVaTe"}


def rl_stage_params(config: RunConfig) -> dict:
    """What the RL stage records as its params: the shared rl section and the running algorithm's own section."""
    algorithm = config.rl.algorithm
    return {
        "rl": config.rl.model_dump(mode="json"),
        algorithm: getattr(config, algorithm).model_dump(mode="json"),
    }


def _refuse_retired(data: dict, source: str) -> None:
    named = [dotted for dotted in RETIRED if _lookup(data, dotted) is not _ABSENT]
    if named:
        raise ConfigError(
            f"invalid config from {source}:\n"
            + "\n".join(f"  {dotted}: retired, measured not to help ({RETIRED[dotted][1]})" for dotted in named)
        )


def _explain(error: ValidationError, source: str) -> ConfigError:
    lines = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "<root>"
        kind = {"extra_forbidden": "unknown key", "missing": "missing required key"}.get(item["type"], item["msg"])
        lines.append(
            f"  {key}: {kind}"
            + (
                f" (got {item['input']!r})"
                if item["type"] not in ("missing",) and not isinstance(item.get("input"), dict)
                else ""
            )
        )
    return ConfigError(f"invalid config from {source}:\n" + "\n".join(lines))


def _merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def dotted_to_nested(overrides: dict[str, Any]) -> dict:
    """{'grpo.max_steps': 5} -> {'grpo': {'max_steps': 5}}"""
    nested: dict = {}
    for dotted, value in overrides.items():
        node = nested
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def load_config(profile: str | Path = "cpu-smoke", overrides: dict[str, Any] | None = None) -> RunConfig:
    """Load a profile by name (lib/profiles/NAME.yaml) or path, apply dotted overrides, validate."""
    path = Path(profile)
    if path.suffix not in (".yaml", ".yml"):
        path = PROFILES_DIR / f"{profile}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown profile {str(profile)!r}; available: {available_profiles()}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    data = _merge(raw, dotted_to_nested(overrides or {}))
    _refuse_retired(data, str(path) + (f" with overrides {overrides}" if overrides else ""))
    _refuse_moved(data, str(path) + (f" with overrides {overrides}" if overrides else ""))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise _explain(error, str(path) + (f" with overrides {overrides}" if overrides else "")) from None


def override_config(config: RunConfig, overrides: dict[str, Any], source: str = "a run's config") -> RunConfig:
    """`config` with dotted overrides applied and validated again (errors name every offending key)."""
    data = _merge(config.model_dump(mode="json"), dotted_to_nested(overrides))
    _refuse_retired(data, f"{source} with overrides {overrides}")
    _refuse_moved(data, f"{source} with overrides {overrides}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise _explain(error, f"{source} with overrides {overrides}") from None
