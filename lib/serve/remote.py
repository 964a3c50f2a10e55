"""`RemoteEnvironment`: a served environment (`python -m lib serve`) behind the same interface `lib.episodes.play`
drives in-process environments through, so the one episode runner also plays over the wire.

Used by multi-turn GRPO when `grpo.env_url` is set (lib/training/multiturn.py) and by the test that compares the
served and in-process paths (tests/test_multiturn.py). One instance holds one OpenEnv WebSocket session (OpenEnv's
synchronous client); the server renders every prompt, so this side needs none of the environment's code.

    env = RemoteEnvironment("http://127.0.0.1:8000")
    observation = env.reset(3, "holdout")
    result = env.step(observation.candidates[0].answer)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..envs.base import Candidate, StepResult
from .client import WorkbookClient
from .wire import WorkbookAction


@dataclass(frozen=True)
class RemoteCandidate(Candidate):
    """An offered action as the server sent it, with the answer text that names it."""

    answer: str = ""


@dataclass(frozen=True)
class RemoteObservation:
    """One state as the server sent it: the chat messages (the server's one renderer) and the candidates."""

    messages: list[dict]
    candidates: tuple[RemoteCandidate, ...]
    step: int


class RemoteEnvironment:
    """One session of the environment served at `url`: `reset(seed, split)`, `step(text)`, `render(observation)`,
    `history`, `seed`, `split`, `done` and `name`, as `lib.episodes.play` needs them. `restore` is not offered:
    rebuilding a mid-episode state needs the environment itself."""

    def __init__(self, url: str):
        self.url = url
        self._client = WorkbookClient(url).sync()
        self._client.connect()
        self.name: str | None = None
        self.seed: int | None = None
        self.split: str | None = None
        self.history: list[str] = []
        self.done = True

    @staticmethod
    def _observation(payload) -> RemoteObservation:
        candidates = tuple(
            RemoteCandidate(c["id"], c["kind"], tuple(c["args"]), c["text"], c["answer"]) for c in payload.candidates
        )
        return RemoteObservation(payload.messages, candidates, payload.step)

    def reset(self, seed: int, split: str) -> RemoteObservation:
        result = self._client.reset(seed=seed, split=split)
        self.name, self.seed, self.split = result.observation.env, seed, split
        self.history, self.done = [], False
        return self._observation(result.observation)

    def step(self, text: str) -> StepResult:
        result = self._client.step(WorkbookAction(text=text))
        payload = result.observation
        self.history.append(text)
        self.done = bool(result.done)
        return StepResult(
            self._observation(payload), float(result.reward or 0.0), self.done, dict(payload.components), payload.info
        )

    def render(self, observation: RemoteObservation) -> list[dict]:
        return observation.messages

    def restore(self, seed: int, split: str, history: list[str]):
        raise NotImplementedError("a served environment cannot rebuild a mid-episode state; play from reset")

    def close(self) -> None:
        self._client.close()
