"""The committed reference runs: the run folders git tracks under outputs/ (which is ignored, so a run is committed
with `git add -f`), not whatever else a local outputs/ holds."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the README's claim run: its table, its gate from the committed files, its replay
CLAIM_RUN = REPO / "outputs" / "pg-upd-s0"


def committed_runs() -> list[Path]:
    """Every tracked folder `outputs/<run>/`, sorted."""
    tracked = subprocess.run(["git", "ls-files", "outputs"], cwd=REPO, capture_output=True, text=True).stdout.split()
    return sorted({REPO / "outputs" / Path(p).parts[1] for p in tracked})
