"""Pure-Python work spread over the machine's cores: the scripted policies' episodes in evaluation
(lib/evaluation/scripted.py) and the candidates' returns that pick the corpus's GRPO states (lib/training/corpus.py).

Workers are forked, as torch's DataLoader workers are: they run Python environments and never touch the parent's
CUDA, and a script that calls this needs no `if __name__ == "__main__"` guard (a spawned worker would re-run it).
A worker that dies (killed for memory, say) costs time, not results: the calls run again in this process.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

from tqdm.auto import tqdm


def cores() -> int:
    """The cores this process may run on (a container's share, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def fork_map(function, calls: list[tuple], workers: int, desc: str | None = None) -> list:
    """[function(*call) for call in calls], in order, with the calls spread over `workers` forked processes (in
    this process when `workers` <= 1 or there is one call). `function` and the calls' arguments must pickle."""
    if workers <= 1 or len(calls) <= 1:
        return [function(*call) for call in calls]
    done: dict[int, object] = {}
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(calls)), mp_context=get_context("fork")) as pool:
            futures = {pool.submit(function, *call): index for index, call in enumerate(calls)}
            for future in tqdm(as_completed(futures), total=len(futures), desc=desc, leave=False, disable=not desc):
                done[futures[future]] = future.result()
    except BrokenProcessPool as error:
        warnings.warn(f"a worker process died ({error}); running its calls in this process", stacklevel=2)
        return [function(*call) for call in calls]
    return [done[index] for index in range(len(calls))]
