"""Environment registry: `make_env(name)` is how every stage gets an environment."""
from __future__ import annotations

from .base import Environment


def make_env(name: str) -> Environment:
    if name == "polyguard":
        from .polyguard.env import PolyGuardEnv

        return PolyGuardEnv()
    raise ValueError(f"unknown environment {name!r}; available: ['polyguard']")
