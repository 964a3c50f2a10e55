"""What a run records about where it ran: the code's git state, the package versions, the machine (platform, CPU
model and its bf16 instructions, GPU) and a process's peak resident memory.

Used by every stage through `lib.runs` (a run's manifest.json and each stage.json), `python -m lib fork`, the
benchmarks (`python -m lib bench-*`) and `lib.models.resolved_precision` (bf16 on a CPU only with its instructions).
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "tokenizers", "papermill", "unsloth")


def git_state(root: Path | None = None) -> dict[str, Any]:
    root = root or Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout.strip()
        )
        return {"sha": sha, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"sha": None, "dirty": None}


def _cpuinfo() -> tuple[str, list[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown", []
    name = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "unknown"
    )
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return name, flags


def cpu_model() -> str:
    """The CPU's model name and widest vector extension: CPU results are bit-for-bit reproducible only on the same
    kind of CPU (float rounding follows the SIMD path), so a run records which one it had."""
    name, flags = _cpuinfo()
    widest = "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "sse"
    return f"{name} ({widest})"


BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # the CPU instructions that make bf16 matrix products fast


def cpu_bf16() -> list[str]:
    """The bf16 instructions this CPU has ([] on one without: bf16 would be emulated, slower than fp32)."""
    flags = set(_cpuinfo()[1])
    return [flag for flag in BF16_FLAGS if flag in flags]


def hardware() -> dict[str, Any]:
    import torch

    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_model(),
        "cpu_bf16": cpu_bf16(),
        "cuda": torch.cuda.is_available(),
        # oneDNN's per-shape kernel cache, where a user set its size (docs/GUIDE.md, "The pipeline": memory)
        "onednn_primitive_cache": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"),
    }
    if torch.cuda.is_available():  # pragma: no cover - CUDA only
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _trim_heap() -> None:
    """Return freed heap memory to the system where the C library can (glibc); a no-op elsewhere."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak_rss() -> str:
    """Reset this process's peak resident memory (Linux: write 5 to /proc/self/clear_refs, which resets VmHWM).
    Returns the scope the next `peak_rss_mb` covers: "stage" after a reset, "process" where none was possible.
    The memory the allocator kept from freed objects is handed back first (glibc's `malloc_trim`), so the peak after
    a reset is what comes next, not what came before."""
    _trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return "stage"
    except OSError:
        return "process"


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB: VmHWM (Linux), else getrusage's lifetime maximum."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(peak / (1024 * 1024 if platform.system() == "Darwin" else 1024), 1)
