"""The tiny run the training tests start from, typed once: a test file takes `MICRO` (corpus, SFT and GRPO at their
smallest) and `MICRO_EVAL` (evaluation and export at their smallest) and changes only what its tests are about."""

MICRO = {
    "corpus.sft_episodes": 10,
    "corpus.grpo_prompts": 16,
    "sft.epochs": 1,
    "sft.batch_size": 8,
    "sft.check_episodes": 3,  # the imitation check on 3 teacher episodes (its own tests: tests/test_imitation.py)
    "grpo.max_steps": 2,
    "grpo.batch_size": 8,
    "grpo.num_generations": 4,
    "rl.validate_every": 0,  # the validation curve has its own test
}
MICRO_EVAL = {
    "eval.episodes": 6,
    "eval.train_episodes": 3,
    "eval.ablation_episodes": 3,
    "eval.ablations": ["sampled"],
    "eval.bootstrap_resamples": 200,
    "export.check_prompts": 3,
    "export.postsave_episodes": 2,
}


def corpus_run(profile: str, overrides: dict, folder):
    """A run of `profile` with `overrides` whose corpus stage has run: (config, run, the SFT rows)."""
    from lib.config import load_config
    from lib.io import read_records
    from lib.runs import Run
    from lib.training.corpus import run_corpus

    config = load_config(profile, overrides)
    run = Run(folder, config)
    run_corpus(config, run)
    return config, run, read_records(run.read_stage("corpus")["outputs"]["sft.jsonl"])


def finished_run(overrides: dict, folder, policies: list[str], after_rl=None):
    """A cpu-smoke run with `overrides` through every stage the gate reads (corpus, sft, the RL stage, evaluate with the
    baseline `policies`, export, postsave): (config, run). `after_rl(run)` may change the trained adapter first."""
    from lib.config import load_config
    from lib.evaluation.evaluate import run_evaluate
    from lib.export.merge import run_export
    from lib.export.postsave import run_postsave
    from lib.runs import Run
    from lib.training.corpus import run_corpus
    from lib.training.rl import run_rl
    from lib.training.sft import run_sft

    config = load_config("cpu-smoke", overrides)
    run = Run(folder, config)
    run_corpus(config, run)
    run_sft(config, run)
    run_rl(config, run)
    if after_rl is not None:
        after_rl(run)
    run_evaluate(config, run, policies=policies)
    run_export(config, run)
    run_postsave(config, run)
    return config, run
