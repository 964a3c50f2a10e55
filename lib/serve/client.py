"""`WorkbookClient`: OpenEnv's WebSocket client for a served workbook environment (one server-side session per
client), and `play_served`, which plays many episodes against a server at once with any actor: what the
multi-turn GRPO sampler (lib/training/multiturn.py) and the load benchmark (lib/bench/bench_serve.py) drive.

    client = WorkbookClient("http://127.0.0.1:8000").sync()
    with client:
        result = client.reset(seed=3, split="holdout")
        result = client.step(WorkbookAction(text=result.observation.candidates[0]["answer"]))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

from .wire import WorkbookAction, WorkbookObservation, WorkbookState


class ServerLostError(ConnectionError):
    """The environment server went away mid-episode (killed or restarted): its sessions are gone."""


class WorkbookClient(EnvClient[WorkbookAction, WorkbookObservation, WorkbookState]):
    """A client TRL-side code can drive: `reset(seed=, split=)` and `step(WorkbookAction(text=...))` return OpenEnv
    `StepResult`s whose `observation` is a `WorkbookObservation` (the prompt's chat messages and the candidates)."""

    def _step_payload(self, action: WorkbookAction) -> dict:
        return {"text": action.text}

    def _parse_result(self, payload: dict) -> StepResult[WorkbookObservation]:
        observation = WorkbookObservation(
            **payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict) -> WorkbookState:
        return WorkbookState(**payload)

    async def _send_and_receive(self, message: dict) -> dict:
        try:
            return await super()._send_and_receive(message)
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as error:
            raise ServerLostError(f"lost the environment server at {self._ws_url}: {error}") from error
        except Exception as error:  # websockets' ConnectionClosed* and their kin
            if type(error).__name__.startswith("ConnectionClosed"):
                received = getattr(error, "rcvd", None)
                why = (
                    "a message over the server's size limit"
                    if getattr(received, "code", None) == 1009
                    else "the server was killed or restarted?"
                )
                raise ServerLostError(
                    f"the environment server at {self._ws_url} closed the session mid-episode ({why}): {error}"
                ) from error
            raise


# act(observations of the live episodes) -> one answer text each
Actor = Callable[[list[WorkbookObservation]], list[str]]


async def _play(url: str, starts: list[tuple[int, str]], act: Actor, max_turns: int) -> list[dict]:
    clients = [WorkbookClient(url) for _ in starts]
    try:
        await asyncio.gather(*(c.connect() for c in clients))
        results = await asyncio.gather(*(c.reset(seed=seed, split=split) for c, (seed, split) in zip(clients, starts)))
        episodes = [{"seed": seed, "split": split, "turns": []} for seed, split in starts]
        live = list(range(len(starts)))
        for _ in range(max_turns):
            if not live:
                break
            observations = [results[i].observation for i in live]
            answers = act(observations)
            stepped = await asyncio.gather(*(clients[i].step(WorkbookAction(text=a)) for i, a in zip(live, answers)))
            for i, observation, answer, result in zip(live, observations, answers, stepped):
                episodes[i]["turns"].append({"observation": observation, "answer": answer, "reward": result.reward})
                results[i] = result
            live = [i for i in live if not results[i].done]
        for episode, result in zip(episodes, results):
            episode["done"] = result.done
            episode["episode_return"] = result.observation.episode_return if result.done else None
        return episodes
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def play_served(url: str, starts: list[tuple[int, str]], act: Actor, max_turns: int = 1000) -> list[dict]:
    """Play one episode per (seed, split) in `starts` against the server at `url`, all at once (one session each);
    every turn `act` answers every live episode. Returns each episode's turns (observation, answer, reward), `done`
    and `episode_return` (None for an episode cut off at `max_turns`)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop in this thread: the usual case
        return asyncio.run(_play(url, starts, act, max_turns))
    # called from inside a running event loop (a Jupyter kernel runs one): play on a worker thread's own loop
    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(asyncio.run, _play(url, starts, act, max_turns)).result()
