"""Each environment README's baseline tables are what `python -m lib env-table` prints for the command in the block's
marker: the test runs that command again and compares."""

import shlex
from pathlib import Path

import pytest

from lib.__main__ import main
from lib.reporting.env_tables import generated_blocks

REPO = Path(__file__).resolve().parents[1]
ENVS = ("polyguard", "sentinel_trust", "sentinel_cluster", "json_tasks")
# Regenerating a block plays every scripted policy on hundreds of episodes per split: 6-14 s each on the 2-core
# machine (2026-11-26), sentinel_cluster's about 45 s. They are a third of `make test-fast`'s two minutes, so all of
# them are in the slow tier; CI (`make test`) runs them all.
SLOW = set(ENVS)


def _readme(env: str) -> str:
    return (REPO / "lib" / "envs" / env / "README.md").read_text()


@pytest.mark.parametrize("env", [pytest.param(e, marks=pytest.mark.slow) if e in SLOW else e for e in ENVS])
def test_every_generated_table_is_what_its_command_prints_now(env, capsys):
    blocks = generated_blocks(_readme(env))
    assert len(blocks) == 1, f"{env}: expected one env-table block, found {len(blocks)}"
    for command, body in blocks:
        argv = shlex.split(command)
        assert argv[argv.index("--env") + 1] == env, command
        capsys.readouterr()
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert body.strip() == printed.strip(), f"{env} README block is stale: run `python -m lib {command}`"


@pytest.mark.parametrize("env", ENVS)
def test_the_readme_shows_the_command_its_block_was_made_by(env):
    text = _readme(env)
    for command, body in generated_blocks(text):
        assert f"```bash\npython -m lib {command}\n```" in text, command  # visible, not only in the marker
        n = shlex.split(command)[shlex.split(command).index("--episodes") + 1]
        assert f"({n} episodes per split)" in body.splitlines()[0]  # the caption states the count and splits


def test_the_tables_are_formatting_only():
    """env_tables formats reports; it reads no environment and plays no episode itself."""
    from lib.reporting.env_tables import env_tables

    def report(split, returns):
        policies = {
            name: {
                "kind": kind,
                "mean_return": sum(r) / len(r),
                "ci95": [min(r), max(r)],
                "rule_ended": 0.0,
                "returns": {str(i): v for i, v in enumerate(r)},
            }
            for name, (kind, r) in returns.items()
        }
        return {"env": "toy", "split": split, "episodes": 2, "seed": 0, "teacher": "t", "policies": policies}

    returns = {"o": ("baseline", [1.0, 1.0]), "t": ("baseline", [0.5, 0.7]), "z": ("trivial", [0.0, 0.1])}
    text = env_tables({"holdout": report("holdout", returns), "holdout_novel": report("holdout_novel", returns)})
    assert "seeds 0-1 of `holdout` and `holdout_novel` (2 episodes per split)" in text
    assert "| o | +0.400 [+0.300, +0.500] | +0.400 [+0.300, +0.500] |" in text
    assert "| the best trivial policy | `z` -0.550 [-0.600, -0.500] |" in text
    with pytest.raises(ValueError, match="differ"):
        env_tables({"holdout": report("holdout", returns), "train": {**report("train", returns), "episodes": 3}})
