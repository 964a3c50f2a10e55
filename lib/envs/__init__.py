"""The environment registry: `get_spec(name)` and `make_env(name)` are how every stage reaches an environment.

A name is either a package under `lib/envs/` that exposes `SPEC` (found by listing the folder, so this module
names none of them), or a dotted module path (`my_pkg.my_env`) whose module exposes `SPEC`: an environment that
lives outside this repository, importable in every process the run starts.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from .base import Environment
from .spec import EnvSpec

_HERE = Path(__file__).parent


class UnknownEnvironmentError(ValueError):
    """`config.env` or `--env` names no environment; the message lists the known ones."""


def builtin_names() -> list[str]:
    """The environment packages under lib/envs/ (every sub-package is one)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(_HERE)]) if m.ispkg)


@cache
def get_spec(name: str) -> EnvSpec:
    if not isinstance(name, str) or not name:
        raise UnknownEnvironmentError(f"environment must be a non-empty name; known: {builtin_names()}")
    module_name = f"{__name__}.{name}" if name in builtin_names() else name if "." in name else None
    if module_name is None:
        raise UnknownEnvironmentError(
            f"unknown environment {name!r}; known: {builtin_names()} "
            "(or a dotted module path whose module defines SPEC)"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UnknownEnvironmentError(
            f"environment {name!r}: cannot import {module_name} ({error}); known: {builtin_names()}"
        ) from None
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, EnvSpec):
        raise UnknownEnvironmentError(f"environment {name!r}: {module_name} defines no SPEC (an EnvSpec)")
    return spec


def make_env(name: str) -> Environment:
    return get_spec(name).make_env()


__all__ = ["EnvSpec", "Environment", "UnknownEnvironmentError", "builtin_names", "get_spec", "make_env"]
