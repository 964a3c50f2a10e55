"""`python -m lib serve --env NAME [--env-args JSON] [--port P] [--run-dir R]`: one environment of the registry as
an OpenEnv server, with the workbook's HTTP sessions, the dashboard and the replayed trained policy on the same port.
The environment is `get_spec(NAME, env_args)`; serving a run whose config has `env_args`, the run's own (see
`build_app`).

Routes:
- OpenEnv's own (`openenv.core.env_server.http_server.create_fastapi_app`): `/ws` (one persistent session per
  WebSocket, what `WorkbookClient` and TRL-side rollouts use), `/health`, `/schema`, `/metadata`, and the stateless
  `/reset` (a first observation) and `/step` (409: a step needs a session).
- Sessions over plain HTTP: `POST /sessions` {seed, split} opens one and resets it, `POST /sessions/{id}/step`
  {text}, `GET /sessions/{id}`, `DELETE /sessions/{id}`.
- The dashboard `/` and what it reads: `/api/info`, `/api/episode?policy=&split=&seed=` (a whole episode, step by
  step), `/api/run` (gate verdict, charts, evaluated means), `/api/charts/{name}`, and `/policy/model_status` (the
  active model: the served run's manifest and its replay).

Bad input is a 4xx with a JSON `detail`, and touches no other session: malformed JSON and wrong fields (422), an
unknown session (404), a step after done (409), a body over `max_body` bytes (413), too many sessions (429).
The server writes nothing to disk and reads only the package's files and the served run's folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Body, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from openenv.core.env_server.http_server import create_fastapi_app

from ..envs import EnvironmentArgsError, EnvSpec, get_spec
from ..envs.base import SPLITS, Action, parse_action, split_seed
from ..episodes import Live, Start, Step, play, policy_actor
from ..io import read_json
from ..runs import read_config
from .replay import REPLAY_FILE, REPLAYED, ReplayError, load
from .served import BadRequestError, ServedEnvironment, ServeError, Sessions, UnknownSessionError
from .wire import MAX_WIRE_ACTION_CHARS, WorkbookAction, WorkbookObservation, candidates_payload, json_safe

DASHBOARD = Path(__file__).with_name("dashboard.html")
MAX_BODY = 64 * 1024  # bytes; every request body and WebSocket message above it is refused
MAX_TRACE_STEPS = 500  # an episode the dashboard plays is cut off here (no environment comes near it)


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 before any route reads it, whether the
    client declared its length or streamed it (chunked). The body is read here first, at most `limit` bytes of
    it, and handed on whole: a route's own body parsing would turn an error raised mid-read into a 400."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(send)
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before its body was complete
                return None
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                return await self._refuse(send)
            if not message.get("more_body", False):
                break
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replayed_receive():
            return pending.pop() if pending else await receive()

        await self.app(scope, replayed_receive, send)

    async def _refuse(self, send):
        body = json.dumps({"detail": f"request body over {self.limit} bytes"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _read_run(run_dir: Path | None, env_name: str) -> dict:
    """What the dashboard shows of the served run: manifest, gate verdict, charts, evaluated means, replay."""
    if run_dir is None:
        return {"run_dir": None}
    manifest = read_json(run_dir / "manifest.json")
    if manifest["config"]["env"] != env_name:
        raise ValueError(f"{run_dir} is a run of {manifest['config']['env']!r}, not of {env_name!r}")
    gate = read_json(run_dir / "gate.json") if (run_dir / "gate.json").exists() else None
    evaluated = {}
    if (run_dir / "evaluate" / "eval.json").exists():
        for split, block in read_json(run_dir / "evaluate" / "eval.json")["splits"].items():
            evaluated[split] = {
                name: {"kind": p["kind"], "mean_return": p["mean_return"], "ci95": p["ci95"]}
                for name, p in block["policies"].items()
            }
    charts = sorted(p.name for p in (run_dir / "charts").glob("*.png")) if (run_dir / "charts").is_dir() else []
    return {
        "run_dir": str(run_dir),
        "run_id": manifest.get("run_id", run_dir.name),
        "profile": manifest["config"]["profile"],
        "git": manifest.get("git"),
        "gate": gate,
        "evaluated": evaluated,
        "charts": charts,
    }


def _served_spec(env_name: str, env_args: dict | None, run_dir: Path | None) -> EnvSpec:
    """`env_name` built with `env_args`; serving a run whose config has env_args, the run's own config's spec (its
    environment built with those; other `env_args` given as well are an error)."""
    run_args = read_json(run_dir / "manifest.json")["config"].get("env_args") if run_dir is not None else None
    if run_args:
        if env_args and env_args != run_args:
            raise EnvironmentArgsError(
                f"{run_dir} is a run of {env_name!r} with env_args {run_args}; cannot serve it with {env_args}"
            )
        return read_config(run_dir).spec  # validating the run's config builds its environment with its env_args
    return get_spec(env_name, env_args)


def _trace(spec: EnvSpec, env_name: str, policy, split: str, seed: int) -> dict:
    """One whole episode of `policy` in a fresh environment of `spec` (called `env_name`), every step as the
    dashboard shows it. It is played by `lib.episodes.play`, cut off after MAX_TRACE_STEPS answers; a cut-off trace
    says `truncated`, with no return or end reason (its last step has none)."""
    scripted = policy_actor(policy, copies=False)

    def act(live: list[Live]) -> list[str]:
        for entry in live:  # what the policy was shown, taken before it acts
            entry.extra = {
                "messages": entry.env.render(entry.observation),
                "candidates": candidates_payload(entry.observation),
            }
        return scripted(live)

    steps = []

    def record(step: Step) -> None:
        parsed = parse_action(step.text, step.observation.candidates)
        result = step.result
        steps.append(
            {
                "step": len(steps) + 1,
                "messages": step.live.extra["messages"],
                "candidates": step.live.extra["candidates"],
                "answer": step.text,
                "chosen": result.info.get("action"),
                "chosen_id": parsed.candidate.id if isinstance(parsed, Action) else None,
                "reward": result.reward,
                "components": result.components,
                "info": json_safe(result.info),
                "replay_miss": bool(getattr(policy, "last_miss", False)),
            }
        )

    play(spec.make_env, [Start(seed, split)], act, on_step=record, max_turns=MAX_TRACE_STEPS)
    final = steps[-1]["info"] if steps else {}
    return {
        "env": env_name,
        "split": split,
        "seed": seed,
        "policy": policy.name if hasattr(policy, "name") else str(policy),
        "steps": steps,
        "truncated": not (steps and steps[-1]["info"].get("end_reason")),  # cut off at MAX_TRACE_STEPS
        "episode_return": final.get("episode_return"),
        "end_reason": final.get("end_reason"),
        "replay_misses": sum(s["replay_miss"] for s in steps),
    }


def build_app(
    env_name: str,
    run_dir: str | Path | None = None,
    *,
    env_args: dict | None = None,
    max_sessions: int = 256,
    max_body: int = MAX_BODY,
):
    """The server of `env_name` built with `env_args` (see the module docstring); it reports the environment as
    `env_name`. With `run_dir` (a run of `env_name`), the run's trained policy is served from its replay.jsonl as
    `grpo` (if recorded), and the dashboard shows its charts and gate verdict; a run whose config has env_args is
    served with them (`env_args` given too must be the same)."""
    run_dir = Path(run_dir).resolve() if run_dir is not None else None
    run = _read_run(run_dir, env_name)
    spec = _served_spec(env_name, env_args, run_dir)
    replay, replay_error = None, None
    if run_dir is not None:
        try:
            replay = load(run_dir, spec)
        except ReplayError as error:
            replay_error = str(error)
    app = create_fastapi_app(
        lambda: ServedEnvironment(spec, env_name), WorkbookAction, WorkbookObservation, max_concurrent_envs=max_sessions
    )
    app.title = f"agent-rl-workbook: {env_name}"
    app.add_middleware(BodyLimit, limit=max_body)
    sessions = Sessions(spec, capacity=max_sessions, name=env_name)

    @app.exception_handler(ServeError)
    async def _refused(request: Request, error: ServeError):
        return JSONResponse({"detail": str(error), "error": type(error).__name__}, status_code=error.status)

    policies = list(spec.reported_policies) + ([REPLAYED] if replay is not None else [])

    def make_policy(name: str):
        if name == REPLAYED and replay is not None:
            return replay.policy()
        if name not in spec.policies:
            raise BadRequestError(f"unknown policy {name!r}; this server has {policies}")
        return spec.make_policy(name)

    _session_routes(app, sessions)
    view = Dashboard(env_name, spec, run, run_dir, replay, replay_error, policies, make_policy, sessions)
    _dashboard_routes(app, view)
    return app


def _session_routes(app, sessions: Sessions) -> None:
    """The session API: open (reset), step, state and close, each session its own environment behind a lock."""

    @app.post("/sessions", tags=["Sessions"])
    def open_session(seed: int = Body(..., ge=0), split: str = Body("holdout")):
        key, served = sessions.open()
        try:
            observation = served.reset(seed=seed, split=split)
        except ServeError:
            sessions.close(key)
            raise
        return {"session_id": key, **observation.model_dump()}

    @app.post("/sessions/{key}/step", tags=["Sessions"])
    def session_step(key: str, text: str = Body(..., embed=True, max_length=MAX_WIRE_ACTION_CHARS)):
        served, lock = sessions.use(key)
        with lock:
            return served.step(WorkbookAction(text=text)).model_dump()

    @app.get("/sessions/{key}", tags=["Sessions"])
    def session_state(key: str):
        served, lock = sessions.use(key)
        with lock:
            return served.state.model_dump()

    @app.delete("/sessions/{key}", tags=["Sessions"])
    def close_session(key: str):
        sessions.close(key)
        return {"closed": key}


@dataclass
class Dashboard:
    """What the dashboard's routes read: the environment, the served run (if any) and its replayed policy."""

    env_name: str
    spec: Any
    run: dict
    run_dir: Path | None
    replay: Any
    replay_error: str | None
    policies: list[str]
    make_policy: Callable
    sessions: Sessions
    misses: dict = field(default_factory=lambda: {"steps": 0, "episodes": 0})


def _dashboard_routes(app, view: Dashboard) -> None:
    """The dashboard page and its API: the environment's policies, one traced episode, the run, its charts."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard():
        return DASHBOARD.read_text(encoding="utf-8")

    @app.get("/api/info", tags=["Dashboard"])
    def info():
        return {
            "env": view.env_name,
            "splits": [split for split in ("holdout", "holdout_novel", "train") if split in SPLITS],
            "policies": view.policies,
            "roles": dict(view.spec.roles),
            "teacher": view.spec.teacher,
            "replayed": REPLAYED if view.replay is not None else None,
            "sessions_open": len(view.sessions),
        }

    @app.get("/api/episode", tags=["Dashboard"])
    def episode(policy: str, seed: int, split: str = "holdout"):
        try:
            split_seed(seed, split)  # the seed and split an environment would accept
        except ValueError as error:
            raise BadRequestError(str(error)) from None
        trace = _trace(view.spec, view.env_name, view.make_policy(policy), split, seed)
        if policy == REPLAYED:
            view.misses["episodes"] += 1
            view.misses["steps"] += trace["replay_misses"]
        return trace

    @app.get("/api/run", tags=["Dashboard"])
    def run_view():
        return view.run

    @app.get("/api/charts/{name}", tags=["Dashboard"])
    def chart(name: str):
        if name not in view.run.get("charts", []):  # only the listed files: no path ever reaches the disk
            raise UnknownSessionError(f"no chart {name!r} in the served run")
        return FileResponse(Path(view.run["run_dir"]) / "charts" / name, media_type="image/png")

    @app.get("/policy/model_status", tags=["Dashboard"])
    def model_status():
        return {
            "env": view.env_name,
            "active": view.run_dir is not None,
            "run_id": view.run.get("run_id"),
            "profile": view.run.get("profile"),
            "git": view.run.get("git"),
            "policy": REPLAYED if view.replay is not None else None,
            "mode": "replay (no model loaded)" if view.replay is not None else "scripted policies only",
            "replay_file": str(view.run_dir / REPLAY_FILE) if view.replay is not None else None,
            "replay_error": view.replay_error,
            "replay_episodes": len(view.replay.seeds) if view.replay is not None else 0,
            "artifacts": view.replay.artifacts if view.replay is not None else [],
            "replay_misses_served": dict(view.misses),
        }
