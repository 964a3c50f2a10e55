"""Every registered environment as an OpenEnv server, its client, the replay of a trained run, and the dashboard.

`python -m lib serve --env NAME [--port P] [--run-dir R]` (lib/serve/app.py) starts one; the grpo stage's
`grpo.mode: multi_turn` plays whole training episodes through it (lib/training/multiturn.py), and
`python -m lib replay record --run-dir R` (lib/serve/replay.py) writes what the dashboard replays.
"""
