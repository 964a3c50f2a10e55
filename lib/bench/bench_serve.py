"""`python -m lib bench-serve --env ENV --clients 32 --seconds 20 --out bench/serve_load.json`: a load
benchmark of the environment server, not a test.

It starts a fresh server on localhost (`lib.serve.launch.served`: `python -m lib serve`, one uvicorn process) and
runs `clients` `WorkbookClient`s over OpenEnv's WebSocket (`/ws`) at once, all in this process's one asyncio loop,
for `seconds`. Each client plays episodes back to back (holdout split, seeds client, client + clients, ...), every
step the `answer` of an offered candidate drawn by its own `random.Random(client index)`: the server, not a
policy, is what is measured. Connecting is not timed; the clock starts when every client is connected.

Reported: episodes finished and steps taken within the time, steps per second, the round-trip latency of a step
(p50/p95/p99/max, in ms, as the client sees it: send, server step, render, receive), `server_errors` (every error
response or exception a client met, a lost connection included), `crashed_sessions` (clients whose connection
died), `invalid_steps` (steps the server scored invalid: none, as every answer is an offered one), and the
machine (CPU model), Python and package versions and the date. The JSON holds no machine paths.
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import random
import time
from datetime import datetime, timezone
from importlib import metadata

from ..provenance import cpu_model
from ..serve.client import ServerLostError, WorkbookClient
from ..serve.launch import served
from ..serve.wire import WorkbookAction

SPLIT = "holdout"
MAX_ERROR_SAMPLES = 5


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def _summary_ms(seconds: list[float]) -> dict:
    values = sorted(s * 1000.0 for s in seconds)
    pick = lambda q: None if not values else round(_percentile(values, q), 3)
    return {
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "max": pick(1.0),
        "mean": round(sum(values) / len(values), 3) if values else None,
    }


class _Tally:
    def __init__(self):
        self.episodes = self.steps = self.resets = self.invalid = 0
        self.server_errors = self.crashed = 0
        self.step_latency: list[float] = []
        self.reset_latency: list[float] = []
        self.errors: list[str] = []

    def error(self, text: str) -> None:
        self.server_errors += 1
        if len(self.errors) < MAX_ERROR_SAMPLES:
            self.errors.append(text[:300])


async def _client(client: WorkbookClient, index: int, clients: int, deadline: float, tally: _Tally) -> None:
    """Episodes back to back until `deadline`; a lost connection ends this client (a crashed session)."""
    rng = random.Random(index)
    seed = index
    try:
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            try:
                result = await client.reset(seed=seed % 1_000_000, split=SPLIT)
            except RuntimeError as error:  # an error response: the session lives on
                if isinstance(error, ServerLostError):
                    raise
                tally.error(f"reset: {error}")
                seed += clients
                continue
            tally.reset_latency.append(time.perf_counter() - began)
            tally.resets += 1
            seed += clients
            while not result.done and time.perf_counter() < deadline:
                answer = rng.choice(result.observation.candidates)["answer"]
                began = time.perf_counter()
                try:
                    result = await client.step(WorkbookAction(text=answer))
                except RuntimeError as error:
                    if isinstance(error, ServerLostError):
                        raise
                    tally.error(f"step: {error}")
                    break
                tally.step_latency.append(time.perf_counter() - began)
                tally.steps += 1
                tally.invalid += bool(result.observation.info.get("invalid"))
            if result.done:
                tally.episodes += 1
    except (ServerLostError, ConnectionError, OSError, asyncio.TimeoutError) as error:
        tally.crashed += 1
        tally.error(f"client {index}: {type(error).__name__}: {error}")
    except Exception as error:  # anything else a client meets is the server's fault too, and is counted
        tally.error(f"client {index}: {type(error).__name__}: {error}")


async def _load(url: str, clients: int, seconds: float) -> tuple[_Tally, float]:
    tally = _Tally()
    connected = [WorkbookClient(url, connect_timeout_s=30.0, message_timeout_s=60.0) for _ in range(clients)]
    try:
        await asyncio.gather(*(c.connect() for c in connected))
        began = time.perf_counter()
        deadline = began + seconds
        await asyncio.gather(*(_client(c, i, clients, deadline, tally) for i, c in enumerate(connected)))
        elapsed = time.perf_counter() - began
    finally:
        await asyncio.gather(*(c.close() for c in connected), return_exceptions=True)
    return tally, elapsed


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def bench_serve(env_name: str, clients: int = 32, seconds: float = 20.0) -> dict:
    """`clients` concurrent WebSocket clients against a fresh localhost server of `env_name` for `seconds`; returns
    the figures described in the module docstring."""
    if clients < 1 or seconds <= 0:
        raise ValueError(f"need clients >= 1 and seconds > 0, got {clients} and {seconds}")
    with served(env_name) as url:
        tally, elapsed = asyncio.run(_load(url, clients, seconds))
    return {
        "env": env_name,
        "clients": clients,
        "seconds": seconds,
        "elapsed_s": round(elapsed, 3),
        "split": SPLIT,
        "actor": "a uniformly random offered candidate's answer, random.Random(client index) per client",
        "episodes": tally.episodes,
        "resets": tally.resets,
        "steps": tally.steps,
        "steps_per_s": round(tally.steps / elapsed, 1) if elapsed > 0 else None,
        "episodes_per_s": round(tally.episodes / elapsed, 2) if elapsed > 0 else None,
        "latency_ms": _summary_ms(tally.step_latency),
        "reset_latency_ms": _summary_ms(tally.reset_latency),
        "server_errors": tally.server_errors,
        "crashed_sessions": tally.crashed,
        "invalid_steps": tally.invalid,
        "errors": tally.errors,
        "setup": "python -m lib serve on 127.0.0.1 (one uvicorn process); all clients in one asyncio loop of the "
        "benchmark process, WorkbookClient over /ws",
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "openenv_core": _version("openenv-core"),
        "uvicorn": _version("uvicorn"),
        "websockets": _version("websockets"),
        "fastapi": _version("fastapi"),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
