"""The command-line arguments that several floors' verbs share. Each floor of lib/ registers its own verbs
(`add_verbs` in its cli.py, or in the loose module itself); lib/__main__.py only dispatches."""

from __future__ import annotations

SET_HELP = "config overrides, e.g. grpo.max_steps=5; repeat --set or list several after one"


def env_help() -> str:
    """The help of an `--env` argument: the built-in environments, or any module defining SPEC."""
    from .envs import builtin_names

    return f"one of {builtin_names()} or a dotted module path defining SPEC"


def add_set(parser, help=SET_HELP) -> None:
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", help=help)


def add_env_args(parser) -> None:
    """`--env-arg KEY=VALUE ...`: an environment's arguments, as a run's `env_args` (read with `parse_overrides`)."""
    parser.add_argument(
        "--env-arg",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="the environment's arguments, as a run's env_args (each value read as YAML)",
    )


def parse_overrides(pairs: list[str]) -> dict:
    """`--set` pairs as the config overrides they name: {"grpo.max_steps": 5, ...} (each value read as YAML)."""
    import yaml

    overrides = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} must look like key.path=value")
        key, value = pair.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    return overrides
