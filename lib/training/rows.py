"""The one shape of an SFT corpus row, for the teacher's own episodes (corpus.py) and DAgger's (dagger.py)."""

from __future__ import annotations


def sft_row(env, observation, seed: int, position: int, history, executed: str, teacher: str, label: str, source: str):
    """One SFT corpus row: the state as the model reads it, `label` as its answer (`source` says whose), and what
    replays the state (seed, split, history); `executed` is what was played there, `teacher` the teacher's action."""
    return {
        "prompt": env.render(observation),
        "completion": [{"role": "assistant", "content": label}],
        "seed": seed,
        "split": "train",
        "position": position,
        "history": list(history),
        "executed": executed,
        "teacher": teacher,
        "label_source": source,
    }
