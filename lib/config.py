"""The one run configuration: a pydantic `RunConfig` (unknown keys rejected) loaded from lib/profiles/*.yaml.

Used by every stage (`python -m lib stage ...`, `python -m lib run ...`) and every notebook's parameters.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

# the config's history, re-exported: callers find RETIRED, MOVED and migrate_config here too
from .config_history import (  # noqa: F401
    MOVED,
    RETIRED,
    drop_retired,
    migrate_config,
    moved_lines,
    retired_in,
    retired_lines,
)

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


def _policies_named(name: str | None) -> list[str]:
    """The environment's policies a labeller's name rests on: none for unset or `improver` (the teacher's lookahead),
    the finishing policy for `improver:<policy>`, else the name itself."""
    if name is None:
        return []
    kind, _, reference = name.partition(":")
    return ([reference] if reference else []) if kind == "improver" else [name]


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
            "corpus.sft_policy": _policies_named(self.corpus.sft_policy),
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


def _refuse_history(data: dict, source: str) -> None:
    """A new config naming a retired setting, else one moved out of the grpo section: a ConfigError naming each (and
    its evidence, or its new key: lib/config_history.py)."""
    for lines in (retired_lines(data), moved_lines(data)):
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
    _refuse_history(data, str(path) + (f" with overrides {overrides}" if overrides else ""))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise _explain(error, str(path) + (f" with overrides {overrides}" if overrides else "")) from None


def override_config(config: RunConfig, overrides: dict[str, Any], source: str = "a run's config") -> RunConfig:
    """`config` with dotted overrides applied and validated again (errors name every offending key)."""
    data = _merge(config.model_dump(mode="json"), dotted_to_nested(overrides))
    _refuse_history(data, f"{source} with overrides {overrides}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise _explain(error, f"{source} with overrides {overrides}") from None
