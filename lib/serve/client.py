"""`WorkbookClient`: OpenEnv's WebSocket client for a served workbook environment (one server-side session per
client): what `RemoteEnvironment` (lib/serve/remote.py, the served environment the one episode runner plays) and
the load benchmark (lib/bench/bench_serve.py) drive.

    client = WorkbookClient("http://127.0.0.1:8000").sync()
    with client:
        result = client.reset(seed=3, split="holdout")
        result = client.step(WorkbookAction(text=result.observation.candidates[0]["answer"]))
"""

from __future__ import annotations

import asyncio

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
