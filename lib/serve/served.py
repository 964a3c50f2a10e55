"""One workbook environment as an OpenEnv `Environment` (what OpenEnv's server runs, one instance per session),
and the HTTP session table the dashboard and `WorkbookClient` use.

Every environment of the registry is served by this same code: it names none of them, and is handed the spec
(`EnvSpec`) it serves.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment

from ..envs import EnvSpec
from .wire import WorkbookAction, WorkbookObservation, WorkbookState, check_split, observation_payload


class ServeError(Exception):
    """A request the server refuses; `status` is the HTTP status it answers with (always a 4xx)."""

    status = 400


class EpisodeOverError(ServeError):
    status = 409


class UnknownSessionError(ServeError):
    status = 404


class CapacityError(ServeError):
    status = 429


class BadRequestError(ServeError):
    status = 422


class ServedEnvironment(OpenEnvEnvironment):
    """A workbook environment behind OpenEnv's interface: `reset(seed, split)` and `step(WorkbookAction)` return
    `WorkbookObservation`s. Instances share nothing, so OpenEnv may run many sessions at once. Each holds a fresh
    environment of `spec`; `name` (default `spec.name`) is what its episode ids and state call the environment."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, spec: EnvSpec, name: str | None = None):
        super().__init__()
        self.env_name = name or spec.name
        self.env = spec.make_env()
        self.episode_id: str | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, split: str = "holdout") -> Any:
        if seed is None:
            raise BadRequestError("reset needs a seed (an int in [0, 1000000))")
        try:
            check_split(split)
            observation = self.env.reset(seed, split)
        except ValueError as error:
            raise BadRequestError(str(error)) from None
        self.episode_id = episode_id or f"{self.env_name}/{split}/{seed}/{uuid.uuid4().hex[:8]}"
        return observation_payload(self.env, observation)

    def step(self, action: WorkbookAction, timeout_s: float | None = None) -> WorkbookObservation:
        if self.episode_id is None:
            raise EpisodeOverError("no episode in this session: reset(seed, split) first")
        if self.env.done:
            raise EpisodeOverError("the episode is over: reset(seed, split) to start another")
        result = self.env.step(action.text)
        return observation_payload(
            self.env,
            result.observation,
            reward=result.reward,
            done=result.done,
            components=result.components,
            info=result.info,
        )

    @property
    def state(self) -> WorkbookState:
        started = self.episode_id is not None
        return WorkbookState(
            episode_id=self.episode_id,
            step_count=len(self.env.history) if started else 0,
            env=self.env_name,
            seed=self.env.seed if started else None,
            split=self.env.split if started else None,
            done=self.env.done if started else True,
        )


class Sessions:
    """The HTTP sessions: id -> its own `ServedEnvironment` of `spec` (called `name`), each behind its own lock. At
    most `capacity` live at once; one idle for `idle_s` seconds is dropped when a new one is opened."""

    def __init__(self, spec: EnvSpec, capacity: int, idle_s: float = 600.0, *, name: str | None = None):
        self.spec, self.name, self.capacity, self.idle_s = spec, name, capacity, idle_s
        self._lock = threading.Lock()
        self._table: dict[str, tuple[ServedEnvironment, threading.Lock, list[float]]] = {}

    def open(self) -> tuple[str, ServedEnvironment]:
        with self._lock:
            now = time.monotonic()
            for key in [k for k, (_, _, seen) in self._table.items() if now - seen[0] > self.idle_s]:
                del self._table[key]
            if len(self._table) >= self.capacity:
                raise CapacityError(f"{len(self._table)} sessions are open, the most this server keeps; close one")
            key = uuid.uuid4().hex
            self._table[key] = (ServedEnvironment(self.spec, self.name), threading.Lock(), [now])
            return key, self._table[key][0]

    def use(self, key: str):
        """(environment, its lock) of session `key`; an unknown id is a clear 404."""
        with self._lock:
            entry = self._table.get(key)
            if entry is None:
                raise UnknownSessionError(
                    f"unknown session {key!r}: it was closed, timed out, or the server restarted; open a new one"
                )
            entry[2][0] = time.monotonic()
            return entry[0], entry[1]

    def close(self, key: str) -> None:
        with self._lock:
            if self._table.pop(key, None) is None:
                raise UnknownSessionError(f"unknown session {key!r}")

    def __len__(self) -> int:
        return len(self._table)
