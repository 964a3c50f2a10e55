"""The wheels a lent device lacks (lib/bench/lease.py's first half): found here, where the package index is
reachable (`prepare`), and gathered and installed there, call by call (`gather_wheels`, `install_wheels`). The
device side is stdlib only: it runs before the carried wheels are installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..io import atomic_write_text, sha256_file

# one call carries at most 64 MiB in all, the working tree's own files (tracked and untracked, not ignored) included:
# each call's folder of wheels gets what the tree leaves, less a margin
CARRY_BYTES = 64 * 1024 * 1024
MARGIN_BYTES = 1024 * 1024


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_sums(text: str) -> dict[str, str]:
    """`sha256sum` lines -> {wheel file name: sha256}; a malformed line is an error, not a skipped wheel."""
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            raise ValueError(f"SHA256SUMS line {number} is not '<sha256> <file>': {line!r}")
        sums[parts[1].lstrip("*")] = parts[0]
    return sums


def gather_wheels(carried: Path, store: Path) -> tuple[list[Path], list[str]]:
    """Copy what this call carried into `store` (it outlives the call's working tree), join the parts of a split
    wheel, and return (the whole wheels that match SHA256SUMS, the names still missing or incomplete)."""
    if not carried.is_dir():
        raise FileNotFoundError(
            f"--wheels {carried} is not a folder: carry it with the call (a call that only "
            "watches a started run needs no --wheels)"
        )
    store.mkdir(parents=True, exist_ok=True)
    sums_files = sorted(carried.rglob("SHA256SUMS"))
    if not sums_files and not (store / "SHA256SUMS").exists():
        raise FileNotFoundError(f"no SHA256SUMS under {carried}: make it with `python -m lib.bench.lease prepare`")
    for path in sorted(p for p in carried.rglob("*") if p.is_file()):
        target = store / path.name
        if not target.exists() or sha256_file(target) != sha256_file(path):
            shutil.copyfile(path, store / f".{path.name}.tmp")
            os.replace(store / f".{path.name}.tmp", target)
    sums = read_sums((store / "SHA256SUMS").read_text())
    whole, missing = [], []
    for name, digest in sorted(sums.items()):
        target = store / name
        parts = sorted(store.glob(f"{name}.part-*"))
        if (not target.exists() or sha256_file(target) != digest) and parts:
            with (store / f".{name}.tmp").open("wb") as out:
                for part in parts:
                    out.write(part.read_bytes())
            os.replace(store / f".{name}.tmp", target)
        if target.exists() and sha256_file(target) == digest:
            whole.append(target)
        else:
            missing.append(name)
    return whole, missing


def _pip(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")


def install_wheels(wheels: list[Path], store: Path) -> Path:
    """pip install --no-deps --no-index into store/site (the run puts it first on PYTHONPATH, so a carried version
    shadows the image's), once per set of wheels: a marker file remembers it across calls. Returns the folder."""
    site, marker = store / "site", store / ".installed"
    names = "\n".join(sorted(w.name for w in wheels))
    if marker.exists() and marker.read_text() == names:
        return site
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "--no-compile",
        "--no-cache-dir",
        "--quiet",
        "--upgrade",
        "--target",
        str(site),
        *map(str, wheels),
    ]
    _pip(command, "pip install of the carried wheels")
    atomic_write_text(marker, names)
    return site


def requirement_closure(requirements: list[str], alone: tuple[str, ...] = ()) -> dict[str, tuple[str, list[str]]]:
    """{distribution: (installed version, every specifier asked of it)} for the requirements and everything they
    need, read from this environment's installed metadata (extras' and other platforms' requirements left out).
    The `alone` requirements come without their own (installed with --no-deps, as `make setup` installs the model
    wheel)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    environment = {
        "python_version": "3.12",
        "python_full_version": "3.12.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "extra": "",
    }
    seen: dict[str, tuple[str, list[str]]] = {}
    asked: dict[str, list[str]] = {}
    todo = [Requirement(r) for r in (*requirements, *alone)]
    lonely = {_normal(Requirement(r).name) for r in alone}
    while todo:
        requirement = todo.pop()
        name = _normal(requirement.name)
        if str(requirement.specifier):
            asked.setdefault(name, []).append(str(requirement.specifier))
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as error:
            raise RuntimeError(f"{name} is not installed here: run `make setup` before `prepare`") from error
        seen[name] = (dist.version, [])
        for line in [] if name in lonely else dist.requires or []:
            needed = Requirement(line)
            if needed.marker is None or needed.marker.evaluate(environment):
                todo.append(needed)
    return {name: (version, asked.get(name, [])) for name, (version, _) in seen.items()}


def to_carry(needed: dict[str, tuple[str, list[str]]], present: dict[str, str]) -> dict[str, str]:
    """{distribution: version to carry}: what the device lacks, or has at a version some requirement refuses (its
    torch, CUDA libraries and the rest are kept when every requirement accepts them)."""
    from packaging.specifiers import SpecifierSet

    carry = {}
    for name, (version, specifiers) in needed.items():
        have = present.get(name)
        if have is None or not all(SpecifierSet(s).contains(have, prereleases=True) for s in specifiers):
            carry[name] = version.split("+")[0]
    return carry


def device_versions(pip_list: Path) -> dict[str, str]:
    """`pip list` output (its two header lines, then name and version) -> {distribution: version}."""
    versions = {}
    for line in pip_list.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.startswith(("Package", "---")):
            versions[_normal(parts[0])] = parts[1]
    if not versions:
        raise ValueError(f"{pip_list} has no `pip list` rows")
    return versions


def tree_bytes(tree: Path) -> int:
    """The bytes of the working tree a device call sends: git's tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=tree,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return sum((tree / name.decode()).stat().st_size for name in listed if name and (tree / name.decode()).is_file())


def bin_files(files: list[tuple[str, int]], limit: int) -> list[list[str]]:
    """First-fit decreasing: file names into as few call folders as fit under `limit` bytes each."""
    calls: list[tuple[int, list[str]]] = []
    for name, size in sorted(files, key=lambda f: -f[1]):
        if size > limit:
            raise ValueError(f"{name} is {size} bytes, over one call's {limit}: split it first")
        for index, (used, names) in enumerate(calls):
            if used + size <= limit:
                calls[index] = (used + size, names + [name])
                break
        else:
            calls.append((size, [name]))
    return [names for _, names in calls]


def prepare(
    dest: Path,
    pip_list: Path,
    requirements: list[str],
    alone: list[str],
    skip: list[str],
    call_bytes: int,
    python_version: str = "3.12",
) -> list[Path]:
    """Download the wheels the device lacks into dest/call-N folders; return the folders to carry, in order.
    `skip` names requirements a run does not import (serving's), left out with what only they need."""
    from packaging.requirements import Requirement

    skipped = {_normal(name) for name in skip}
    kept = [line for line in requirements if _normal(Requirement(line).name) not in skipped]
    missing = to_carry(requirement_closure(kept, tuple(alone)), device_versions(pip_list))
    download = dest / "download"
    shutil.rmtree(dest, ignore_errors=True)
    download.mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--python-version",
        python_version,
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_28_x86_64",
        "--implementation",
        "cp",
        "-d",
        str(download),
        *(f"{name}=={version}" for name, version in sorted(missing.items())),
    ]
    _pip(command, "pip download")
    wheels = sorted(download.glob("*.whl"))
    sums = "".join(f"{sha256_file(w)}  {w.name}\n" for w in wheels)
    pieces: list[tuple[Path, int]] = []
    for wheel in wheels:
        data_size = wheel.stat().st_size
        if data_size <= call_bytes - len(sums):
            pieces.append((wheel, data_size))
            continue
        with wheel.open("rb") as source:
            for index, block in enumerate(iter(lambda: source.read(call_bytes - len(sums)), b"")):
                part = download / f"{wheel.name}.part-{index:02d}"
                part.write_bytes(block)
                pieces.append((part, len(block)))
        wheel.unlink()
    by_name = {path.name: path for path, _ in pieces}
    folders = []
    for number, names in enumerate(bin_files([(p.name, s) for p, s in pieces], call_bytes - len(sums)), 1):
        folder = dest / f"call-{number}"
        folder.mkdir()
        for name in names:
            os.replace(by_name[name], folder / name)
        (folder / "SHA256SUMS").write_text(sums)
        folders.append(folder)
    shutil.rmtree(download)
    return folders


def _requirement_lines(files: list[str]) -> list[str]:
    lines = []
    for name in files:
        for line in Path(name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line and not line.startswith("-"):
                lines.append(line)
    return lines
