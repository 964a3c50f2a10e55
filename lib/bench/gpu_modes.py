"""`python -m lib bench-gpu ... --modes auto,never`: the same benchmark once per `model.use_unsloth` mode, each in a
fresh process (Unsloth patches transformers and TRL when it is imported, so two modes cannot share one), with the
whole device's used memory sampled meanwhile (NVML, where pynvml is installed) and whether Unsloth imports at all.
`auto` is skipped, with the reason recorded, when `import unsloth` fails. One JSON: each mode's own bench-gpu report
under `modes`, beside the code's commit; no machine paths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds lib/


class NvmlPeak:
    """Samples the device's used memory (all processes, CUDA contexts included) every 0.2 s while running."""

    def __init__(self):
        self.peak_mb = None
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - NVML is optional
            self._nvml = None

    def used_mb(self):
        return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2**20 if self._nvml else None

    def __enter__(self):
        if self._nvml:
            self.peak_mb = self.used_mb()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(0.2):
            self.peak_mb = max(self.peak_mb, self.used_mb())

    def __exit__(self, *exc):
        self._stop.set()
        if self._nvml:
            self._thread.join()
            self.peak_mb = round(max(self.peak_mb, self.used_mb()), 1)


def _environment() -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return env


def unsloth_probe(env: dict) -> dict:
    """Whether Unsloth is installed and imports in a fresh process (its import fails on some images)."""
    try:
        metadata.version("unsloth")
    except metadata.PackageNotFoundError:
        return {"installed": False, "importable": False, "error": "unsloth is not installed"}
    done = subprocess.run(
        [sys.executable, "-c", "import unsloth; print('unsloth', unsloth.__version__)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return {
        "installed": True,
        "importable": done.returncode == 0,
        "error": None if done.returncode == 0 else "\n".join(lines[-25:]),
        "import_output_tail": lines[-10:],
    }


def _one_mode(argv: list[str], mode: str, env: dict, log) -> dict:
    """`python -m lib bench-gpu <argv> --set model.use_unsloth=<mode>` in a fresh process; its report, exit code,
    wall time and the device's peak used memory."""
    with tempfile.TemporaryDirectory(prefix="bench-gpu-mode-") as scratch:
        out = Path(scratch) / f"{mode}.json"
        command = [sys.executable, "-m", "lib", "bench-gpu", *argv, f"model.use_unsloth={mode}", "--out", str(out)]
        log.write(f"$ python -m lib bench-gpu {' '.join(argv)} model.use_unsloth={mode}\n")
        log.flush()
        began = time.perf_counter()
        with NvmlPeak() as nvml:
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log.write(done.stdout)
        record = {
            "rc": done.returncode,
            "wall_s": round(time.perf_counter() - began, 2),
            "nvml_peak_used_mb": nvml.peak_mb,
        }
        if out.exists():
            record["report"] = json.loads(out.read_text())
        if done.returncode != 0:
            record["error_tail"] = done.stdout.splitlines()[-60:]
    return record


def source() -> dict:
    """Which code ran: the commit in SOURCE_SHA beside lib/ (written when the tree is a `git archive` snapshot, as on
    a device without git), else git's own."""
    from ..provenance import git_state

    marker = PACKAGE_ROOT / "SOURCE_SHA"
    if marker.exists():
        return {"sha": marker.read_text().strip(), "how": "git archive snapshot (SOURCE_SHA)"}
    return {**git_state(PACKAGE_ROOT), "how": "git"}


def run_modes(modes: list[str], argv: list[str], log_path: Path | None = None) -> dict:
    """Each mode's bench-gpu report (`argv`: the bench-gpu arguments, ending with `--set` and its overrides), run in
    order, each in its own process; every process's console output goes to `log_path` when given."""
    env = _environment()
    result: dict = {"modes_requested": modes, "source": source(), "modes": {}}
    if "auto" in modes:
        result["unsloth"] = unsloth_probe(env)
    with open(log_path or os.devnull, "w", encoding="utf-8") as log:
        for mode in modes:
            if mode == "auto" and not result["unsloth"]["importable"]:
                why = result["unsloth"]["error"].splitlines()[-1]
                result["modes"][mode] = {
                    "skipped": "import unsloth failed, so auto would either crash in lib.models.load_model "
                    f"(installed) or fall back to trl_transformers (not installed): {why}"
                }
                continue
            result["modes"][mode] = _one_mode(argv, mode, env, log)
    return result
