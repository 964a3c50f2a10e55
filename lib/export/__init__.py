"""The run's artifact after training: stage `export` (`merge`: the GRPO adapter merged into its base, checked in a
fresh process) and stage `postsave` (`postsave`: a fresh process plays held-out episodes with only the exported
files; also `python -m lib activate`). Both run in notebook 06_export and write export/ and postsave/."""
