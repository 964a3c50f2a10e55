"""`served(env)`: start `python -m lib serve` in a child process on a free localhost port, wait until it answers
/health, and stop it afterwards. The grpo stage's multi-turn mode, the tests and the load benchmark use it.

The child's stdout and stderr go to a temporary log file (never to a pipe nobody reads, which a chatty server
would fill and then block on); a server that fails to start raises `ServerStartError` with the log's tail, and
`stop_server` deletes the log it created.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

LOG_TAIL_CHARS = 4000  # how much of the child's log a ServerStartError quotes
_REPO = Path(__file__).resolve().parents[2]  # the folder holding the `lib` package the child must import


class ServerStartError(RuntimeError):
    """The server process exited or did not answer /health in time; the message holds the tail of its log."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return json.loads(response.read()).get("status") == "healthy"
    except (OSError, ValueError):
        return False


def start_server(
    env_name: str, run_dir: str | Path | None = None, port: int | None = None, log=None, env_args: dict | None = None
):
    """The child process and its base url (see `served`); the caller stops it (`stop_server`). Its output goes to
    `log` (an open file) if given, else to a temporary file at `process.log_path`, removed by `stop_server`."""
    port = port or free_port()
    command = [sys.executable, "-m", "lib", "serve", "--env", env_name, "--port", str(port), "--host", "127.0.0.1"]
    if run_dir is not None:
        command += ["--run-dir", str(run_dir)]
    if env_args:
        command += ["--env-args", json.dumps(env_args)]
    owned = log is None
    if owned:
        log = tempfile.NamedTemporaryFile(  # closed and removed by stop_server
            mode="w", prefix=f"lib-serve-{env_name}-{port}-", suffix=".log", delete=False, encoding="utf-8"
        )
    environment = dict(os.environ, PYTHONUNBUFFERED="1")  # the log's tail is current when we quote it
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p)
    try:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment, text=True
        )
    except BaseException:
        if owned:
            log.close()
            Path(log.name).unlink(missing_ok=True)
        raise
    process.log_path = Path(log.name) if isinstance(getattr(log, "name", None), str) else None
    process.owned_log = log if owned else None
    return process, f"http://127.0.0.1:{port}"


def log_tail(process, chars: int = LOG_TAIL_CHARS) -> str:
    """The last `chars` characters of the server's log ("" when it has none to read)."""
    path = getattr(process, "log_path", None)
    if path is None:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - chars))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def wait_healthy(process, url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(
                f"the server at {url} exited with {process.returncode}; the end of its log:\n{log_tail(process)}"
            )
        if healthy(url):
            return
        time.sleep(0.2)
    process.kill()
    process.wait()
    raise ServerStartError(
        f"the server at {url} did not answer /health within {timeout:.0f} s; the end of its log:\n{log_tail(process)}"
    )


def stop_server(process) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    owned = getattr(process, "owned_log", None)
    if owned is not None:
        owned.close()
        Path(owned.name).unlink(missing_ok=True)
        process.owned_log = None


@contextmanager
def served(env_name: str, run_dir: str | Path | None = None, port: int | None = None, env_args: dict | None = None):
    """Yields the base url of a fresh server of `env_name` (with `run_dir`: its replay and charts; with `env_args`:
    the environment built with them, as a run's config says)."""
    process, url = start_server(env_name, run_dir, port, env_args=env_args)
    try:
        wait_healthy(process, url)
        yield url
    finally:
        stop_server(process)
