"""Which process this is when a stage runs under `accelerate launch` / `torchrun` (one process per rank): every
file of a run is written by rank 0 alone, and the others wait where they need what it wrote.

    accelerate launch --multi_gpu --num_processes 2 -m lib stage sft --run-dir outputs/ID   # 2 CPU processes (gloo)

TRL's trainers shard the data by rank themselves; this module only keeps the run folder single-writer.
"""

from __future__ import annotations

import os


def rank() -> int:
    """This process's global rank (0 when not launched distributed)."""
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    """Whether this process writes the run's files (rank 0, or the only process)."""
    return rank() == 0


def rank_key() -> str:
    """A suffix for the seeds of random draws: '' in one process (so a run draws as it always did), '/r<rank>'
    under accelerate / torchrun, so each rank draws its own."""
    return f"/r{rank()}" if world_size() > 1 else ""


def wait_for_everyone() -> None:
    """A barrier across the launched processes (a no-op in a single process)."""
    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()
