"""The tokens a cache of the previous state's prompt would leave to compute, from the tokenizer alone: the teacher
plays episodes, each state's prompt is tokenized as a model reads it (`candidates.prompt_ids`), and the tokens after
the leading run it shares with the previous state's prompt are the ones a kept cache (`model.episode_cache_mb`)
would still compute. `python -m lib bench-prompt-tokens --env ENV [--env-arg K=V]`.

It also prices the episode as one conversation (`env_args: {turns: conversation}`, `lib.envs.turns.conversation`):
each turn the answer played and a user message of the parts of the state that changed (`changed_sections`).
The tokens a kept cache would compute there are what that form saves a played state; `updates_*` price the same
conversation without the answers (`env_args: {turns: updates}`).

No model runs, so it costs seconds, and it says which line of the prompt ends the shared run (the first line whose
text differs from the previous state's): a rendering whose changing lines come last shares more. The ratio tokens /
new tokens is what a cache can save a played state at most, before the candidates' own tokens."""

from __future__ import annotations

from collections import Counter

from ..candidates import prompt_ids
from ..envs.turns import conversation
from ..episode_cache import _shared_run
from ..episodes import run_episode

HEAD_WORDS = 2  # a line is named by its first words ("Steps left:", "- [3]" ...), digits replaced by '#'


def _line_head(line: str) -> str:
    words = "".join("#" if ch.isdigit() else ch for ch in line).split()[:HEAD_WORDS]
    return " ".join(words) or "(empty line)"


def first_changed_line(before: list[dict], after: list[dict]) -> str:
    """The head of the first line of `after`'s messages that differs from `before`'s ("(system)" for the system
    message, "(appended)" where `after` only adds lines)."""
    if before[0]["content"] != after[0]["content"]:
        return "(system)"
    old, new = before[-1]["content"].split("\n"), after[-1]["content"].split("\n")
    for a, b in zip(old, new):
        if a != b:
            return _line_head(b)
    return "(appended)" if len(new) > len(old) else "(none)"


def _new_tokens(previous_ids, ids: list[int]) -> int:
    """The tokens of `ids` after the run they share with `previous_ids` (all of them where there is none)."""
    return len(ids) - (_shared_run(previous_ids, ids, len(ids)) if previous_ids is not None else 0)


def prompt_token_report(spec, tokenizer, seeds, split: str) -> dict:
    """Per state of the teacher's episodes on `seeds`: its prompt's tokens, the tokens after the run it shares with
    the previous state's prompt (the first state: all of them), and the line where that run ends; and the tokens a
    kept cache would compute were the episode one conversation of what changed (`conversation_*`), and the same
    without the answers given (`updates_*`, `turns: updates`)."""
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    states = tokens = new = conversed = updated = 0
    breaks: Counter = Counter()
    for seed in seeds:
        previous_ids = previous = conversation_ids = updates_ids = None
        rendered: list[list[dict]] = []
        answers: list[str] = []
        for t in run_episode(env, teacher, seed, split, keep_transitions=True).transitions:
            messages = env.render(t["observation"])
            ids = prompt_ids(tokenizer, messages)
            states, tokens, new = states + 1, tokens + len(ids), new + _new_tokens(previous_ids, ids)
            if previous is not None:
                breaks[first_changed_line(previous, messages)] += 1
            rendered.append(messages)
            now = prompt_ids(tokenizer, conversation(rendered, answers))  # as `turns: conversation` renders it
            conversed += _new_tokens(conversation_ids, now)
            told = prompt_ids(
                tokenizer, conversation(rendered, answers, with_answers=False)
            )  # as `turns: updates` does
            updated += _new_tokens(updates_ids, told)
            previous_ids, previous, conversation_ids, updates_ids = tuple(ids), messages, tuple(now), tuple(told)
            answers.append(t["action"])
    if not states:
        raise ValueError(f"the teacher's episodes on {len(seeds)} seeds have no state")
    return {
        "episodes": len(seeds),
        "split": split,
        "states": states,
        "states_per_episode": round(states / len(seeds), 2),
        "tokens_per_state": round(tokens / states, 1),
        "new_tokens_per_state": round(new / states, 1),
        "ratio": round(tokens / new, 2),
        "conversation_tokens_per_state": round(conversed / states, 1),
        "conversation_ratio": round(tokens / conversed, 2),
        "updates_tokens_per_state": round(updated / states, 1),
        "updates_ratio": round(tokens / updated, 2),
        "shared_run_ends_at": dict(breaks.most_common(8)),
    }
