"""Training: the corpus, SFT and GRPO stages and what they share.

Stage map (each stage's entry point is a `run_*` function the stage list in lib/pipeline/stages.py names):
- corpus: `corpus.py` (teacher transcripts on train seeds, GRPO states from rollouts), `rows.py` (the one SFT row
  shape), `dagger.py` (the teacher's labels at an earlier SFT's own states, `corpus.dagger_from`);
- sft: `sft.py` (TRL's SFTTrainer), `imitation.py` (the imitation check at the stage's end);
- grpo: `grpo.py` (TRL's GRPOTrainer), `samplers.py` (the mode switch and the trainer subclass), `rollout.py` (step
  mode's groups over the candidates), `multiturn.py` (whole episodes, `grpo.mode: multi_turn`), `validation.py`
  (the learning curve and the best point), `alarms.py` (collapse alarms), `anchor.py` (the KL term held to the best
  validated point, `grpo.anchor`);
- shared: `harness.py` (precision and tracking arguments, the guards, logging callbacks, atomic saves, TRL's
  log-prob kernel on a CPU-only torch).

Where a lever goes: a setting in its stage's section of lib/config_sections.py, its code in that stage's module, and
a module of its own only when it is a whole mechanism the stage calls. Stages hand over through files
(`lib.io.read_records`), never by importing each other. A lever measured not to help is removed and its key listed
in `lib.config.RETIRED` (docs/GUIDE.md, "lib/training/").
"""
