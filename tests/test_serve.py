"""Behaviour of the environment server (lib/serve): every registered environment served by the same code, played
over HTTP sessions, over OpenEnv's WebSocket client and many episodes at once, bad input answered with a 4xx that
touches no other session, garbage actions left to the environment, a killed server reported clearly, the served
run folder left untouched, the OpenEnv manifests, and the load benchmark's shape.

Served returns are compared with the same episodes played in a local environment: the environment's teacher
answers, and its answer is computed locally (the policy may read the local environment) and sent to the server.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import importlib
import json
import os
import shlex
import shutil
import signal
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from lib.envs import builtin_names, get_spec
from lib.episodes import Start, play, run_episode
from lib.serve import app as serve_app
from lib.serve import launch
from lib.serve.app import MAX_BODY, build_app
from lib.serve.client import ServerLostError, WorkbookClient
from lib.serve.remote import RemoteEnvironment
from lib.serve.wire import MAX_WIRE_ACTION_CHARS, WorkbookAction

ROOT = Path(__file__).resolve().parents[1]
ENVS = builtin_names()
SEEDS = (0, 1, 7)
SPLITS = ("holdout", "train", "holdout_novel")


def _committed_run() -> Path:
    """A committed run folder with charts (the served run of the dashboard tests)."""
    for manifest in sorted((ROOT / "outputs").glob("*/manifest.json")):
        if list((manifest.parent / "charts").glob("*.png")):
            return manifest.parent
    raise AssertionError("no committed run with charts under outputs/")


RUN = _committed_run()
RUN_ENV = json.loads((RUN / "manifest.json").read_text())["config"]["env"]


class Local:
    """The teacher playing one episode in a local environment, one answer at a time."""

    def __init__(self, env_name: str, seed: int, split: str = "holdout"):
        spec = get_spec(env_name)
        self.env, self.policy = spec.make_env(), spec.make_policy(spec.teacher)
        self.observation = self.env.reset(seed, split)
        self.policy.begin(seed)
        self.result, self.last = None, None

    def answer(self) -> str:
        return self.policy.act(self.observation, self.env)

    def step(self, answer: str):
        self.last = answer
        self.result = self.env.step(answer)
        self.observation = self.result.observation
        return self.result

    def messages(self):
        return self.env.render(self.observation)


def local_return(env_name: str, seed: int, split: str = "holdout") -> float:
    local = Local(env_name, seed, split)
    while local.result is None or not local.result.done:
        local.step(local.answer())
    return local.result.info["episode_return"]


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime (ns) of every file under `folder`."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory) -> Path:
    """A copy of the committed run, served by the dashboard tests (the repository's own copy is never served)."""
    target = tmp_path_factory.mktemp("served") / RUN.name
    shutil.copytree(RUN, target)
    return target


@pytest.fixture(scope="module")
def app_client(run_copy):
    with TestClient(build_app(RUN_ENV, run_copy)) as client:
        yield client


@pytest.fixture(scope="module")
def server():
    """url(env): a live `python -m lib serve` of env (started once per module, on first use)."""
    started = {}

    def url(env_name: str) -> str:
        if env_name not in started:
            process, address = launch.start_server(env_name)
            started[env_name] = (process, address)
            launch.wait_healthy(process, address)
        return started[env_name][1]

    yield url
    for process, _ in started.values():
        launch.stop_server(process)


def _open(client: TestClient, seed: int, split: str = "holdout") -> dict:
    response = client.post("/sessions", json={"seed": seed, "split": split})
    assert response.status_code == 200, response.text
    return response.json()


def _teacher_step(client: TestClient, key: str, local: Local) -> dict:
    """One teacher answer through session `key`; asserts the server's verdict is the local environment's."""
    expected = local.step(local.answer())
    response = client.post(f"/sessions/{key}/step", json={"text": local.last})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["reward"], body["done"]) == (expected.reward, expected.done)
    assert body["messages"] == local.messages()
    return body


# ---- every environment, the same code ------------------------------------------------------------------------------
@pytest.mark.parametrize("env_name", ENVS)
def test_http_sessions_play_every_environment_as_locally(env_name):
    with TestClient(build_app(env_name)) as client:
        assert client.get("/api/info").json()["env"] == env_name
        for seed in SEEDS:
            local = Local(env_name, seed)
            opened = _open(client, seed)
            assert opened["messages"] == local.messages()  # the environment's one renderer
            assert [c["id"] for c in opened["candidates"]] == [c.id for c in local.observation.candidates]
            body = opened
            while not body["done"]:
                body = _teacher_step(client, opened["session_id"], local)
            assert body["episode_return"] == local.result.info["episode_return"] == local_return(env_name, seed)
            state = client.get(f"/sessions/{opened['session_id']}").json()
            assert state["done"] and state["step_count"] == len(local.env.history) and state["seed"] == seed
            assert client.delete(f"/sessions/{opened['session_id']}").status_code == 200


@pytest.mark.parametrize("env_name", ENVS)
def test_websocket_client_plays_every_environment_as_locally(server, env_name):
    url = server(env_name)
    for seed, split in zip(SEEDS, SPLITS):
        local = Local(env_name, seed, split)
        with WorkbookClient(url).sync() as client:
            result = client.reset(seed=seed, split=split)
            assert (result.observation.seed, result.observation.split) == (seed, split)
            assert result.observation.messages == local.messages()
            while not result.done:
                expected = local.step(local.answer())
                result = client.step(WorkbookAction(text=local.last))
                assert (result.reward, result.done) == (expected.reward, expected.done)
                assert result.observation.messages == local.messages()
        assert result.observation.episode_return == local_return(env_name, seed, split)


@pytest.mark.parametrize("env_name", ENVS)
def test_the_episode_runner_plays_sixteen_served_episodes_at_once_as_it_plays_local_ones(server, env_name):
    """`lib.episodes.play` over `RemoteEnvironment` sessions (what multi-turn GRPO uses with grpo.env_url): every
    prompt is the local renderer's, and every return the local environment's."""
    starts = [Start(seed, SPLITS[seed % 3]) for seed in range(16)]
    locals_ = {(s.seed, s.split): Local(env_name, s.seed, s.split) for s in starts}

    def act(live):
        answers = []
        for entry in live:
            local = locals_[(entry.seed, entry.start.split)]
            assert entry.env.render(entry.observation) == local.messages()
            answer = local.answer()
            local.step(answer)
            answers.append(answer)
        return answers

    url = server(env_name)
    episodes = play(lambda: RemoteEnvironment(url), starts, act, batch_size=16)
    assert [(e.seed, e.split) for e in episodes] == [(s.seed, s.split) for s in starts]
    for episode in episodes:
        assert episode.episode_return == local_return(env_name, episode.seed, episode.split)
        assert episode.steps == len(locals_[(episode.seed, episode.split)].env.history)


def test_interleaved_sessions_are_isolated():
    with TestClient(build_app(RUN_ENV)) as client:
        players = {}
        for seed in (3, 11):
            opened = _open(client, seed)
            players[opened["session_id"]] = [Local(RUN_ENV, seed), opened]
        while any(not body["done"] for _, body in players.values()):
            for key, player in players.items():  # one step each, in turn, while both are live
                if not player[1]["done"]:
                    player[1] = _teacher_step(client, key, player[0])
        for local, body in players.values():
            assert body["episode_return"] == local_return(RUN_ENV, local.env.seed)


# ---- garbage actions are the environment's business ----------------------------------------------------------------
@pytest.mark.parametrize("env_name", ENVS)
def test_garbage_answers_are_invalid_steps_not_errors(env_name):
    penalty = get_spec(env_name).make_env().invalid_penalty
    with TestClient(build_app(env_name)) as client:
        key = _open(client, 2)["session_id"]
        bodies = []
        for text in ("hello", '{"action": "zzz"}', ""):
            response = client.post(f"/sessions/{key}/step", json={"text": text})
            assert response.status_code == 200, response.text
            bodies.append(response.json())
        assert all(b["info"]["invalid"] and b["reward"] == penalty for b in bodies)
        assert [b["done"] for b in bodies] == [False, False, True]
        assert bodies[-1]["episode_return"] == 0.0 and bodies[-1]["info"]["end_reason"] == "invalid_limit"


# ---- bad input: a 4xx with a JSON message, and no other session touched --------------------------------------------
def _chunks(total: int, size: int = 8192):
    sent = 0
    while sent < total:
        yield b"x" * min(size, total - sent)
        sent += size


def _finished_session(client: TestClient) -> str:
    key = _open(client, 4)["session_id"]
    for _ in range(3):
        assert client.post(f"/sessions/{key}/step", json={"text": "no"}).status_code == 200
    return key


JSON = {"content-type": "application/json"}
BAD_REQUESTS = {
    # name: (request(client, live session id) -> response, status)
    "malformed JSON step": (lambda c, k: c.post(f"/sessions/{k}/step", content=b'{"text": ', headers=JSON), 422),
    "malformed JSON open": (lambda c, k: c.post("/sessions", content=b"{seed: 1}", headers=JSON), 422),
    "text not a string": (lambda c, k: c.post(f"/sessions/{k}/step", json={"text": 5}), 422),
    "text missing": (lambda c, k: c.post(f"/sessions/{k}/step", json={}), 422),
    "seed not an int": (lambda c, k: c.post("/sessions", json={"seed": "abc"}), 422),
    "split not a string": (lambda c, k: c.post("/sessions", json={"seed": 1, "split": 3}), 422),
    "unknown split": (lambda c, k: c.post("/sessions", json={"seed": 1, "split": "test"}), 422),
    "negative seed": (lambda c, k: c.post("/sessions", json={"seed": -1}), 422),
    "seed too large": (lambda c, k: c.post("/sessions", json={"seed": 10**6}), 422),
    "unknown session step": (lambda c, k: c.post("/sessions/0123abcd/step", json={"text": "x"}), 404),
    "unknown session state": (lambda c, k: c.get("/sessions/0123abcd"), 404),
    "unknown session close": (lambda c, k: c.delete("/sessions/0123abcd"), 404),
    "step after done": (lambda c, k: c.post(f"/sessions/{_finished_session(c)}/step", json={"text": "x"}), 409),
    "stateless OpenEnv step": (lambda c, k: c.post("/step", json={"action": {"text": '{"action": "a1"}'}}), 409),
    "body over the limit": (
        lambda c, k: c.post(f"/sessions/{k}/step", content=b"x" * (MAX_BODY + 1), headers=JSON),
        413,
    ),
    "streamed body over the limit": (
        lambda c, k: c.post(f"/sessions/{k}/step", content=_chunks(MAX_BODY + 1), headers=JSON),
        413,
    ),
    "10 MB action text": (lambda c, k: c.post(f"/sessions/{k}/step", json={"text": "a" * 10_000_000}), 413),
    "action text over the wire bound": (
        lambda c, k: c.post(f"/sessions/{k}/step", json={"text": "a" * (MAX_WIRE_ACTION_CHARS + 1)}),
        422,
    ),
    "unknown policy": (lambda c, k: c.get("/api/episode", params={"policy": "nobody", "seed": 1}), 422),
    "episode of an unknown split": (
        lambda c, k: c.get("/api/episode", params={"policy": get_spec(RUN_ENV).teacher, "seed": 1, "split": "x"}),
        422,
    ),
    "episode of a negative seed": (
        lambda c, k: c.get("/api/episode", params={"policy": get_spec(RUN_ENV).teacher, "seed": -3}),
        422,
    ),
    "chart ../manifest.json": (lambda c, k: c.get("/api/charts/../manifest.json"), 404),
    "chart ..%2Fmanifest.json": (lambda c, k: c.get("/api/charts/..%2Fmanifest.json"), 404),
    "chart not listed": (lambda c, k: c.get("/api/charts/manifest.json"), 404),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_input_is_a_4xx_with_a_json_message_and_the_other_sessions_go_on(app_client, case):
    request, status = BAD_REQUESTS[case]
    local = Local(RUN_ENV, 5)
    key = _open(app_client, 5)["session_id"]
    _teacher_step(app_client, key, local)
    response = request(app_client, key)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["detail"]
    assert '"run_id"' not in response.text and "config" not in response.text  # no manifest content leaks
    body = {"done": False}
    while not body["done"]:  # the session the bad request named, or sat next to, plays on as before
        body = _teacher_step(app_client, key, local)
    assert body["episode_return"] == local_return(RUN_ENV, 5)
    assert app_client.get("/health").json()["status"] == "healthy"
    assert app_client.delete(f"/sessions/{key}").status_code == 200


def test_the_streamed_body_case_sends_no_content_length(app_client):
    response = app_client.post("/sessions", content=_chunks(MAX_BODY + 1), headers=JSON)
    assert "content-length" not in response.request.headers and response.status_code == 413


def test_too_many_sessions_is_a_429_and_closing_one_makes_room():
    with TestClient(build_app(RUN_ENV, max_sessions=2)) as client:
        first, second = _open(client, 1), _open(client, 2)
        refused = client.post("/sessions", json={"seed": 3})
        assert refused.status_code == 429 and "sessions are open" in refused.json()["detail"]
        local = Local(RUN_ENV, 2)
        _teacher_step(client, second["session_id"], local)  # the open ones still play
        assert client.delete(f"/sessions/{first['session_id']}").status_code == 200
        assert _open(client, 3)["seed"] == 3


def test_charts_serves_only_the_listed_files_of_the_served_run(run_copy, app_client):
    listed = app_client.get("/api/run").json()["charts"]
    assert listed == sorted(p.name for p in (run_copy / "charts").glob("*.png")) and listed
    for name in listed:
        response = app_client.get(f"/api/charts/{name}")
        assert response.status_code == 200 and response.content == (run_copy / "charts" / name).read_bytes()
    planted = run_copy / "charts" / "planted_after_start.png"
    planted.write_bytes(b"\x89PNG not listed")
    try:
        assert app_client.get(f"/api/charts/{planted.name}").status_code == 404  # listed at start, never looked up
    finally:
        planted.unlink()


def test_the_dashboard_api_reads_the_run_and_plays_an_episode(app_client):
    run = app_client.get("/api/run").json()
    assert run["run_id"] == RUN.name and run["charts"]
    status = app_client.get("/policy/model_status").json()
    assert status["env"] == RUN_ENV and status["active"]
    spec = get_spec(RUN_ENV)
    trace = app_client.get("/api/episode", params={"policy": spec.teacher, "seed": 6}).json()
    assert trace["episode_return"] == local_return(RUN_ENV, 6)
    assert trace["steps"][0]["messages"] == Local(RUN_ENV, 6).messages()


def test_the_dashboard_trace_is_the_episode_run_episode_plays():
    """The dashboard's episode is `lib.episodes.play`'s: the same return, answers, chosen actions and prompts."""
    spec = get_spec("polyguard")
    with TestClient(build_app("polyguard")) as client:
        for seed in range(5):
            trace = client.get("/api/episode", params={"policy": "heuristic", "seed": seed}).json()
            env = spec.make_env()
            episode = run_episode(env, spec.make_policy("heuristic"), seed, "holdout", keep_transitions=True)
            assert trace["episode_return"] == episode.episode_return and trace["end_reason"] == episode.end_reason
            assert [s["answer"] for s in trace["steps"]] == [t["action"] for t in episode.transitions]
            assert [s["answer"] for s in trace["steps"]] == env.history  # every answer was a valid action
            prompts = [env.render(t["observation"]) for t in episode.transitions]
            assert [s["messages"] for s in trace["steps"]] == prompts
            assert not trace["truncated"] and trace["replay_misses"] == 0


def test_a_trace_cut_off_at_its_step_limit_says_truncated_with_no_return(monkeypatch):
    monkeypatch.setattr(serve_app, "MAX_TRACE_STEPS", 2)
    spec = get_spec("polyguard")
    trace = serve_app._trace(spec, "polyguard", spec.make_policy(spec.teacher), "holdout", 0)
    assert len(trace["steps"]) == 2 and trace["truncated"]
    assert trace["episode_return"] is None and trace["end_reason"] is None


# ---- a real server: raw HTTP, a kill, a restart --------------------------------------------------------------------
def _raw(url: str, method: str, path: str, chunks=None, body: bytes | None = None):
    """(status, body) of one request sent as written: the path unnormalised, the body chunked if `chunks`."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        connection.putheader("Content-Type", "application/json")
        if chunks is not None:
            connection.putheader("Transfer-Encoding", "chunked")
        elif body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders()
        if chunks is not None:
            for chunk in chunks:
                connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            connection.send(b"0\r\n\r\n")
        elif body is not None:
            connection.send(body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_real_server_refuses_streamed_bodies_and_path_tricks(run_copy):
    manifest = (run_copy / "manifest.json").read_bytes()
    with launch.served(RUN_ENV, run_copy) as url:
        status, body = _raw(url, "POST", "/sessions", body=json.dumps({"seed": 8}).encode())
        assert status == 200
        key = json.loads(body)["session_id"]
        assert _raw(url, "POST", f"/sessions/{key}/step", chunks=_chunks(MAX_BODY + 1))[0] == 413
        status, body = _raw(url, "POST", "/sessions", chunks=[b'{"seed"', b": 9}"])
        assert status == 200 and json.loads(body)["seed"] == 9  # a small streamed body is read whole
        for path in (
            "/api/charts/../manifest.json",
            "/api/charts/..%2Fmanifest.json",
            "/api/charts/%2E%2E%2Fmanifest.json",
            "/api/charts/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
            "/api/charts/%2Fetc%2Fpasswd",
        ):
            status, body = _raw(url, "GET", path)
            assert status == 404 and manifest[:40] not in body and b"root:" not in body, path
        local = Local(RUN_ENV, 8)
        expected = local.step(local.answer())
        status, body = _raw(url, "POST", f"/sessions/{key}/step", body=json.dumps({"text": local.last}).encode())
        assert status == 200 and json.loads(body)["reward"] == expected.reward


def test_kill_and_restart_server_lost_then_old_sessions_404_and_no_file_written(run_copy):
    before = _tree(run_copy)
    top_level = sorted(p.name for p in ROOT.iterdir())
    port = launch.free_port()
    process, url = launch.start_server(RUN_ENV, run_copy, port=port)
    try:
        launch.wait_healthy(process, url)
        status, body = _raw(url, "POST", "/sessions", body=b'{"seed": 12}')
        old_key = json.loads(body)["session_id"]
        for path in ("/api/run", "/policy/model_status", f"/api/episode?policy={get_spec(RUN_ENV).teacher}&seed=1"):
            assert _raw(url, "GET", path)[0] == 200

        async def mid_episode_then_kill():
            client = WorkbookClient(url, message_timeout_s=10.0)
            await client.connect()
            local = Local(RUN_ENV, 12)
            result = await client.reset(seed=12, split="holdout")
            expected = local.step(local.answer())
            result = await client.step(WorkbookAction(text=local.last))
            assert result.reward == expected.reward and not result.done
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            try:
                with pytest.raises(ServerLostError, match="killed or restarted|lost the environment server"):
                    await asyncio.wait_for(client.step(WorkbookAction(text=local.answer())), timeout=30)
            finally:
                await client.close()

        asyncio.run(mid_episode_then_kill())
    finally:
        launch.stop_server(process)
    assert not process.log_path.exists()  # the log of the killed server is cleaned up too

    process, url = launch.start_server(RUN_ENV, run_copy, port=port)  # the same port, a fresh server
    try:
        launch.wait_healthy(process, url)
        status, body = _raw(url, "POST", f"/sessions/{old_key}/step", body=b'{"text": "x"}')
        assert status == 404 and "server restarted" in json.loads(body)["detail"]
        with WorkbookClient(url).sync() as client:
            local = Local(RUN_ENV, 12)
            result = client.reset(seed=12, split="holdout")
            while not result.done:
                expected = local.step(local.answer())
                result = client.step(WorkbookAction(text=local.last))
                assert result.reward == expected.reward
        assert result.observation.episode_return == local_return(RUN_ENV, 12)
    finally:
        launch.stop_server(process)
    assert _tree(run_copy) == before  # the server wrote nothing to the served run
    assert sorted(p.name for p in ROOT.iterdir()) == top_level  # nor next to it


def test_a_server_that_cannot_start_raises_with_the_tail_of_its_log():
    process, url = launch.start_server("no_such_environment")
    try:
        with pytest.raises(launch.ServerStartError, match="(?s)exited with.*no_such_environment"):
            launch.wait_healthy(process, url, timeout=60)
        assert process.log_path.exists()
    finally:
        launch.stop_server(process)
    assert not process.log_path.exists()


def test_a_caller_given_log_receives_the_server_output(tmp_path):
    log_path = tmp_path / "server.log"
    with open(log_path, "w", encoding="utf-8") as log:
        process, url = launch.start_server("no_such_environment", log=log)
        with pytest.raises(launch.ServerStartError):
            launch.wait_healthy(process, url, timeout=60)
        launch.stop_server(process)
    assert "no_such_environment" in log_path.read_text()  # the caller's log is kept


# ---- environment arguments: the served environment is built from them, nothing else changes ------------------------
def _json_tasks_file(tmp_path) -> tuple[str, str]:
    """A json_tasks tasks file (tests/test_env_json_tasks.py's) and the prompt of its holdout task."""
    from tests.test_env_json_tasks import TABLE, _good_lines, _write

    return str(_write(tmp_path, _good_lines())), TABLE["prompt"]


def test_env_args_build_the_served_environment_beside_one_without_them(tmp_path):
    path, prompt = _json_tasks_file(tmp_path)
    builtin = get_spec("json_tasks")
    own_app, bare_app = build_app("json_tasks", env_args={"tasks": path}), build_app("json_tasks")
    with TestClient(own_app) as own, TestClient(bare_app) as bare:
        assert own.get("/api/info").json()["env"] == bare.get("/api/info").json()["env"] == "json_tasks"
        assert prompt in json.dumps(_open(own, 0)["messages"])  # holdout seed 0: the file's holdout task
        assert prompt not in json.dumps(_open(bare, 0)["messages"])
        trace = own.get("/api/episode", params={"policy": "oracle", "seed": 0}).json()
        assert prompt in json.dumps(trace["steps"][0]["messages"]) and trace["episode_return"] == 1.0
    assert get_spec("json_tasks") is builtin  # serving with arguments configured nothing in this process


def test_serve_cli_builds_its_environment_from_env_args(tmp_path):
    path, prompt = _json_tasks_file(tmp_path)
    with launch.served("json_tasks", env_args={"tasks": path}) as url:
        status, body = _raw(url, "POST", "/sessions", body=json.dumps({"seed": 0}).encode())
        assert status == 200 and prompt in json.dumps(json.loads(body)["messages"])


# ---- OpenEnv manifests -----------------------------------------------------------------------------------------------
def test_every_environment_package_has_an_openenv_manifest_and_nothing_else_does():
    assert sorted(p.parent.name for p in (ROOT / "lib" / "envs").glob("*/openenv.yaml")) == ENVS


@pytest.mark.parametrize("env_name", ENVS)
def test_openenv_manifest_names_its_environment_and_the_generic_server(env_name):
    from openenv.auto._discovery import _load_manifest_from_package
    from openenv.core.containers.runtime.daytona_provider import DaytonaProvider

    path = ROOT / "lib" / "envs" / env_name / "openenv.yaml"
    text = path.read_text(encoding="utf-8")
    manifest = yaml.safe_load(text)
    assert manifest["spec_version"] == 1 and manifest["name"] == env_name
    assert (manifest["type"], manifest["runtime"], manifest["port"]) == ("space", "fastapi", 8000)
    assert manifest["app"] == "lib.serve.app:build_app" and manifest["args"] == {"env_name": env_name}
    assert shlex.split(manifest["command"]) == (
        f"python -m lib serve --env {env_name} --port {manifest['port']} --host 0.0.0.0".split()
    )
    # what OpenEnv's own readers make of it: discovery loads it as package data, the runtime reads `app`
    assert _load_manifest_from_package("agent-rl-workbook", f"lib.envs.{env_name}") == manifest
    assert DaytonaProvider._parse_app_field(text) == manifest["app"]
    module, attribute = manifest["app"].split(":")
    app = getattr(importlib.import_module(module), attribute)(**manifest["args"])
    with TestClient(app) as client:
        assert client.get("/health").json()["status"] == "healthy"
        assert client.get("/api/info").json()["env"] == env_name


# ---- the load benchmark ----------------------------------------------------------------------------------------------
def test_bench_serve_reports_its_figures_without_errors():
    from lib.bench.bench_serve import bench_serve

    result = bench_serve(RUN_ENV, clients=4, seconds=2.0)
    assert {
        "env",
        "clients",
        "seconds",
        "episodes",
        "steps",
        "steps_per_s",
        "latency_ms",
        "server_errors",
        "crashed_sessions",
        "cpu",
        "python",
        "openenv_core",
        "date",
    } <= set(result)
    assert (result["env"], result["clients"], result["seconds"]) == (RUN_ENV, 4, 2.0)
    assert result["server_errors"] == 0 and result["crashed_sessions"] == 0 and result["errors"] == []
    assert result["steps"] > 0 and result["episodes"] > 0 and result["invalid_steps"] == 0
    latency = result["latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]
    json.dumps(result, allow_nan=False)  # strict JSON


def test_an_oversized_websocket_message_closes_only_its_own_connection(server):
    url = server(RUN_ENV)

    async def oversized_then_fresh():
        other = WorkbookClient(url)
        await other.connect()
        local = Local(RUN_ENV, 9)
        await other.reset(seed=9, split="holdout")
        client = WorkbookClient(url, message_timeout_s=10.0)
        await client.connect()
        await client.reset(seed=1, split="holdout")
        with pytest.raises(ServerLostError, match="message too big"):
            await client._send_and_receive({"type": "step", "data": {"text": "a" * (MAX_BODY + 1)}})
        await client.close()
        result = None
        while result is None or not result.done:  # the session next to it plays on
            expected = local.step(local.answer())
            result = await other.step(WorkbookAction(text=local.last))
            assert result.reward == expected.reward
        await other.close()

    asyncio.run(oversized_then_fresh())


def test_a_remote_environment_works_inside_a_running_event_loop(server):
    """A notebook kernel runs an event loop: the grpo stage's multi-turn sampler is called from inside one."""
    import asyncio

    env_name = "polyguard"
    expected = local_return(env_name, 3, "holdout")
    local = Local(env_name, 3, "holdout")

    def act(live):
        answer = local.answer()
        local.step(answer)
        return [answer]

    async def inside_a_loop():
        url = server(env_name)
        return play(lambda: RemoteEnvironment(url), [Start(3, "holdout")], act)

    (episode,) = asyncio.run(inside_a_loop())
    assert episode.end_reason != "cut_off" and episode.episode_return == expected
