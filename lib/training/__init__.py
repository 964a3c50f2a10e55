"""Training: the corpus, SFT and RL stages and what they share.

Stage map (each stage's entry point is a `run_*` function the stage list in lib/pipeline/stages.py names):
- corpus: `corpus.py` (teacher transcripts on train seeds, GRPO states from rollouts), `dagger.py` (the teacher's
  labels at an earlier SFT's own states, `corpus.dagger_from`);
- sft: `sft.py` (TRL's SFTTrainer), `imitation.py` (the imitation check at the stage's end);
- rl (the stage named `grpo`, its folder grpo/): `rl.py` (the stage: `rl.algorithm` picks the algorithm, side by
  side), `grpo.py` (TRL's GRPOTrainer), `samplers.py` (GRPO's mode switch and the trainer subclass), `rollout.py`
  (step mode's groups over the candidates), `multiturn.py` (whole episodes, `grpo.mode: multi_turn`),
  `prompt_pass.py` (the shared prompt pass on a CPU), `alarms.py` (collapse alarms), `aggrevate.py` (AggreVaTe: the
  improver's labels at the policy's own states), `validation.py` (the learning curve, its one writer, and the best
  point);
- shared: `harness.py` (precision, tracking and SFTConfig arguments, the guards, logging callbacks, atomic saves,
  TRL's log-prob kernel on a CPU-only torch), `packing.py` (SFT batches packed by prefix under `turns:
  conversation`, for the sft stage and AggreVaTe's fits), `rows.py` (the one SFT row shape), `labelling.py` (the seed
  blocks and the rows labelled at a model's own states: DAgger's and AggreVaTe's).

Where a lever goes: a setting in its stage's section of lib/config_sections.py, its code in that stage's module, and
a module of its own only when it is a whole mechanism the stage calls. Stages hand over through files
(`lib.io.read_records`), never by importing each other: a stage's module imports its own stage's modules and the
shared ones only (`STAGE_MODULES`, checked by tests/test_architecture.py). A lever measured not to help is removed
and its key listed in `lib.config_history.RETIRED` (docs/GUIDE.md, "lib/training/").
"""

# Each stage's modules (lib/training/<name>.py) and the shared ones; no module imports another stage's.
STAGE_MODULES: dict[str, tuple[str, ...]] = {
    "corpus": ("corpus", "dagger"),
    "sft": ("sft", "imitation", "balance"),
    "rl": (
        "rl",
        "grpo",
        "samplers",
        "rollout",
        "multiturn",
        "prompt_pass",
        "alarms",
        "aggrevate",
        "validation",
    ),
    "shared": ("harness", "packing", "rows", "labelling"),
}
