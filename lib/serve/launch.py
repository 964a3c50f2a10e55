"""`served(env)`: start `python -m lib serve` in a child process on a free localhost port, wait until it answers
/health, and stop it afterwards. The grpo stage's multi-turn mode, the tests and the load benchmark use it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


class ServerStartError(RuntimeError):
    """The server process exited or did not answer /health in time; the message holds its output."""


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


def start_server(env_name: str, run_dir: str | Path | None = None, port: int | None = None, log=None):
    """The child process and its base url (see `served`); the caller stops it."""
    port = port or free_port()
    command = [sys.executable, "-m", "lib", "serve", "--env", env_name, "--port", str(port), "--host", "127.0.0.1"]
    if run_dir is not None:
        command += ["--run-dir", str(run_dir)]
    process = subprocess.Popen(command, stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, f"http://127.0.0.1:{port}"


def wait_healthy(process, url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise ServerStartError(f"the server at {url} exited with {process.returncode}:\n{output[-4000:]}")
        if healthy(url):
            return
        time.sleep(0.2)
    process.kill()
    raise ServerStartError(f"the server at {url} did not answer /health within {timeout:.0f} s")


def stop_server(process) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def served(env_name: str, run_dir: str | Path | None = None, port: int | None = None):
    """Yields the base url of a fresh server of `env_name` (with `run_dir`: its replay and charts)."""
    process, url = start_server(env_name, run_dir, port)
    try:
        wait_healthy(process, url)
        yield url
    finally:
        stop_server(process)
