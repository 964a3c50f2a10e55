"""The environment registry: `get_spec(name)` and `make_env(name)` are how every stage reaches an environment.

A name is either a package under `lib/envs/` that exposes `SPEC` (found by listing the folder, so this module
names none of them), or a dotted module path (`my_pkg.my_env`) whose module exposes `SPEC`: an environment that
lives outside this repository, importable in every process the run starts.

`configure(name, args)` records constructor arguments for an environment in this process (a run's `env_args`):
from then on `get_spec(name)` is the spec the module's `make_spec(**args)` returns, so `make_env(name)` and every
stage build the environment with those arguments.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import cache
from pathlib import Path
from typing import Any

from .base import Environment
from .spec import EnvSpec

_HERE = Path(__file__).parent


class UnknownEnvironmentError(ValueError):
    """`config.env` or `--env` names no environment; the message lists the known ones."""


class EnvironmentArgsError(ValueError):
    """Arguments an environment does not take, or a second, different configuration of the same environment."""


_CONFIGURED: dict[str, dict[str, Any]] = {}  # environment name -> its constructor arguments in this process


def configure(name: str, args: dict[str, Any] | None) -> None:
    """Build environment `name` with `args` (keyword arguments of its module's `make_spec`) for the rest of this
    process. Empty args are a no-op; configuring the same name again with the same args is one too, with other
    args an error. The spec is built at once, so a bad argument (or a bad file it names) fails here."""
    if not args:
        return
    args = dict(args)
    if name in _CONFIGURED:
        if _CONFIGURED[name] != args:
            raise EnvironmentArgsError(
                f"environment {name!r} is already configured with {_CONFIGURED[name]} in this process; "
                f"cannot configure it again with {args}"
            )
        return
    _CONFIGURED[name] = args
    get_spec.cache_clear()
    try:
        get_spec(name)
    except Exception:
        del _CONFIGURED[name]
        get_spec.cache_clear()
        raise


def configured(name: str) -> dict[str, Any]:
    """The arguments `configure` recorded for `name` ({} if none)."""
    return dict(_CONFIGURED.get(name, {}))


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
    args = _CONFIGURED.get(name)
    if args:
        make_spec = getattr(module, "make_spec", None)
        if make_spec is None:
            raise EnvironmentArgsError(f"environment {name!r} takes no arguments (given: {sorted(args)})")
        parameters = inspect.signature(make_spec).parameters
        accepted = [p for p, v in parameters.items() if v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY)]
        unknown = sorted(set(args) - set(accepted))
        if unknown and not any(v.kind == v.VAR_KEYWORD for v in parameters.values()):
            raise EnvironmentArgsError(
                f"environment {name!r}: unknown argument {', '.join(map(repr, unknown))}; it accepts {accepted}"
            )
        spec = make_spec(**args)
        if not isinstance(spec, EnvSpec):
            raise UnknownEnvironmentError(f"environment {name!r}: {module_name}.make_spec returned no EnvSpec")
    return spec


def make_env(name: str) -> Environment:
    return get_spec(name).make_env()


__all__ = [
    "EnvSpec",
    "Environment",
    "EnvironmentArgsError",
    "UnknownEnvironmentError",
    "builtin_names",
    "configure",
    "configured",
    "get_spec",
    "make_env",
]
