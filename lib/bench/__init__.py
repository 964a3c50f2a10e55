"""Benchmarks and probes: code that measures the workbook, never part of a run's stages.

- `bench_gpu` (`python -m lib bench-gpu`): where a profile's time goes on this machine's accelerator, one JSON; with
  `--random-model qwen2.5-0.5b` on a random-weight model of that shape built without the hub (`random_model`), with
  `--modes auto never` once per Unsloth mode, each in a fresh process (`gpu_modes`). The one GPU benchmark.
- `bench_train` (`python -m lib bench-train`): wall time of the corpus, sft and grpo stage commands, repeated.
- `probe_explore` (`python -m lib probe-explore`): can a policy sample what beats the teacher, on fixed states.
- `probe_policy` (`python -m lib.bench.probe_policy`): greedy agreement with the teacher by action kind.

What they measured and committed lives in bench/ at the repository root (evidence only, no code); bench/README.md
names the command that produced each file.
"""
