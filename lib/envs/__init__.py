"""The environment registry: `get_spec(name, args)` and `make_env(name, args)` are how every stage reaches an
environment.

A name is either a package under `lib/envs/` that exposes `SPEC` (found by listing the folder, so this module
names none of them), or a dotted module path (`my_pkg.my_env`) whose module exposes `SPEC`: an environment that
lives outside this repository, importable in every process the run starts.

`args` are an environment's constructor arguments (a run's `env_args`, JSON values): none, and the spec is the
module's `SPEC`; some, and it is what the module's `make_spec(**args)` returns. `get_spec` is a pure function of
(name, args), memoised on the name and the canonical JSON of the args: cheap to call again, and any number of
configurations of one environment can be held at once (no call changes what another returns). A run's own spec is
`RunConfig.spec`; the memo keeps a file an argument names as it was first read in this process.

Two arguments every environment takes are handled here, not by its module:
- `list_candidates` (a bool, default true). False builds the environment so that its prompt leaves out the candidate
  list (`base.candidate_lines`): a learner that scores each offered answer itself (`model.action_space: candidates`)
  reads the same facts in fewer tokens.
- `turns` (`state`, the default, `conversation` or `updates`; `base.TURNS`). `conversation` writes an episode's
  prompt as one conversation: the first state whole, then each answer and the parts of the state that changed after
  it (`turns.conversation`). `updates` is the same without the answers: what the state form holds, as updates.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import pkgutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .base import TURNS, Environment
from .spec import EnvSpec

_HERE = Path(__file__).parent


class UnknownEnvironmentError(ValueError):
    """`config.env` or `--env` names no environment; the message lists the known ones."""


class EnvironmentArgsError(ValueError):
    """Arguments an environment does not take (or that are not a JSON object)."""


def builtin_names() -> list[str]:
    """The environment packages under lib/envs/ (every sub-package is one)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(_HERE)]) if m.ispkg)


def _canonical(name: str, args: Mapping[str, Any] | None) -> str:
    """The memo key of `args`: their JSON, keys sorted ("{}" for none)."""
    if args is None:
        return "{}"
    if not isinstance(args, Mapping):
        raise EnvironmentArgsError(f"environment {name!r}: arguments must map names to values, got {args!r}")
    try:
        return json.dumps(dict(args), sort_keys=True)
    except (TypeError, ValueError) as error:
        raise EnvironmentArgsError(f"environment {name!r}: arguments must be JSON values ({error})") from None


_SPECS: dict[tuple[str, str], EnvSpec] = {}  # the memo: (name, canonical JSON of the args) -> spec


def _unlisted(make_env: Callable[[], Environment]) -> Environment:
    """An environment of `make_env` whose prompt leaves out the candidate list."""
    env = make_env()
    env.list_candidates = False
    return env


def _with_turns(make_env: Callable[[], Environment], turns: str) -> Environment:
    """An environment of `make_env` whose prompts are written as `turns` says."""
    env = make_env()
    env.turns = turns
    return env


def _without_list(name: str, spec: EnvSpec) -> EnvSpec:
    """`spec`, its environments built with `list_candidates: false`; an environment whose renderer does not take
    that keyword is an EnvironmentArgsError."""
    renderer = getattr(spec.make_env(), "renderer", None)
    try:
        takes = renderer is not None and "list_candidates" in inspect.signature(renderer).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        raise EnvironmentArgsError(
            f"environment {name!r}: its renderer takes no list_candidates keyword, so its prompt cannot leave out "
            "the candidate list (write the list with lib.envs.base.candidate_lines(candidates, list_candidates))"
        )
    return dataclasses.replace(spec, make_env=functools.partial(_unlisted, spec.make_env))


def get_spec(name: str, args: Mapping[str, Any] | None = None) -> EnvSpec:
    """The spec of environment `name` built with `args` (see the module docstring). An unknown name is an
    UnknownEnvironmentError listing the known ones; an argument its `make_spec` does not take (or any argument to
    an environment without `make_spec`) is an EnvironmentArgsError; a bad value (a bad file it names) is the
    module's own error, raised again by every call (only built specs are memoised)."""
    if not isinstance(name, str) or not name:
        raise UnknownEnvironmentError(f"environment must be a non-empty name; known: {builtin_names()}")
    key = (name, _canonical(name, args))
    if key in _SPECS:
        return _SPECS[key]
    own = json.loads(key[1])
    if "turns" in own:
        turns = own.pop("turns")
        if turns not in TURNS:
            raise EnvironmentArgsError(f"environment {name!r}: turns must be one of {list(TURNS)}, got {turns!r}")
        spec = get_spec(name, own or None)
        if turns != "state":
            spec = dataclasses.replace(spec, make_env=functools.partial(_with_turns, spec.make_env, turns))
        return _SPECS.setdefault(key, spec)
    if "list_candidates" in own:
        listed = own.pop("list_candidates")
        if not isinstance(listed, bool):
            raise EnvironmentArgsError(f"environment {name!r}: list_candidates must be true or false, got {listed!r}")
        spec = get_spec(name, own or None)
        return _SPECS.setdefault(key, spec if listed else _without_list(name, spec))
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
    args = json.loads(key[1])  # built from the key itself, so the memo can never hand back another configuration
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
    return _SPECS.setdefault(key, spec)  # a racing thread's spec, if it stored one first: one spec per key


def make_env(name: str, args: Mapping[str, Any] | None = None) -> Environment:
    """A fresh environment of `get_spec(name, args)`."""
    return get_spec(name, args).make_env()


__all__ = [
    "EnvSpec",
    "Environment",
    "EnvironmentArgsError",
    "UnknownEnvironmentError",
    "builtin_names",
    "get_spec",
    "make_env",
]
