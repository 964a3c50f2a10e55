"""bench-prompt-tokens (lib/bench/prompt_tokens.py): the tokens a cache of the previous state's prompt would leave
to compute, from the tokenizer alone, and the line where the shared run ends."""

import pytest

from lib.bench.prompt_tokens import first_changed_line, prompt_token_report
from lib.envs import get_spec
from lib.envs.turns import changed_sections


class CharTokenizer:
    """One token per character of 'role: content' lines: the shared run of two prompts is their common prefix."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [ord(ch) for ch in text]}


def _messages(*lines, system="rules"):
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


def test_the_first_changed_line_is_named_by_its_head_with_digits_masked():
    before = _messages("Patient: age 70", "Steps left: 7", "Open items: none")
    assert (
        first_changed_line(before, _messages("Patient: age 70", "Steps left: 6", "Open items: none")) == "Steps left:"
    )
    assert first_changed_line(before, _messages("Patient: age 71")) == "Patient: age"
    assert first_changed_line(before, _messages(*before[1]["content"].split("\n"), "More")) == "(appended)"
    assert first_changed_line(before, _messages("x", system="other")) == "(system)"
    assert first_changed_line(before, before) == "(none)"


def test_new_tokens_are_what_follows_the_run_shared_with_the_previous_state():
    spec, tokenizer = get_spec("sentinel_cluster"), CharTokenizer()
    report = prompt_token_report(spec, tokenizer, range(2), "holdout")
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    from lib.episodes import run_episode

    texts = []
    for seed in range(2):
        episode = [
            tokenizer.apply_chat_template(env.render(t["observation"]), True, False)
            for t in run_episode(env, teacher, seed, "holdout", keep_transitions=True).transitions
        ]
        texts.append(episode)
    tokens = sum(len(t) for episode in texts for t in episode)
    new = 0
    for episode in texts:
        new += len(episode[0])
        for a, b in zip(episode, episode[1:]):
            shared = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            new += len(b) - shared
    states = sum(map(len, texts))
    assert report["states"] == states and report["tokens_per_state"] == round(tokens / states, 1)
    assert report["new_tokens_per_state"] == round(new / states, 1) and report["ratio"] == round(tokens / new, 2)
    assert sum(report["shared_run_ends_at"].values()) <= states - 2 and "Tick ##" in report["shared_run_ends_at"]


def test_no_state_is_an_error():
    with pytest.raises(ValueError, match="no state"):
        prompt_token_report(get_spec("sentinel_cluster"), CharTokenizer(), range(0), "holdout")


def test_a_conversation_turn_restates_each_changed_section_whole_and_a_grown_list_by_its_new_items():
    before = _messages(
        "Patient: age 70",
        "Evidence:",
        "- [2] renal: avoid",
        "Steps left: 7",
        "Candidates:",
        '- "a"',
        '- "b"',
        "Open items: 2",
    )
    after = _messages(
        "Patient: age 70",
        "Evidence:",
        "- [1] ok",
        "- [2] renal: avoid",
        "Steps left: 6",
        "Candidates:",
        '- "b"',
        "Open items: 2",
    )
    # the evidence kept its item and gained one: its new item only; the candidate list lost one: listed again, whole
    assert changed_sections(before, after) == 'Evidence:\n- [1] ok\nSteps left: 6\nCandidates:\n- "b"'
    assert changed_sections(after, after) == ""
    replaced = _messages("Patient: age 70", "Evidence:", "- none gathered yet")
    grown = _messages("Patient: age 70", "Evidence:", "- [2] renal: avoid", "1. numbered items belong too")
    assert changed_sections(replaced, grown) == "Evidence:\n- [2] renal: avoid\n1. numbered items belong too"


def test_the_conversation_computes_the_first_prompt_then_each_turns_answer_and_changed_sections():
    spec, tokenizer = get_spec("sentinel_trust"), CharTokenizer()
    report = prompt_token_report(spec, tokenizer, range(2), "holdout")
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    from lib.episodes import run_episode

    computed = updated = states = 0
    for seed in range(2):
        previous, answer = None, ""
        for t in run_episode(env, teacher, seed, "holdout", keep_transitions=True).transitions:
            messages = env.render(t["observation"])
            if previous is None:  # the whole first prompt, then per turn: 'assistant: ' was already read
                computed += len(tokenizer.apply_chat_template(messages, True, False))
                updated += len(tokenizer.apply_chat_template(messages, True, False))
            else:
                turn = f"{answer}\nuser: {changed_sections(previous, messages)}\nassistant: "
                computed += len(turn)
                # turns: updates has no answer: the new user turn replaces the 'assistant: ' the cache ended on
                updated += len(f"user: {changed_sections(previous, messages)}\nassistant: ")
            previous, answer, states = messages, t["action"], states + 1
    assert report["conversation_tokens_per_state"] == round(computed / states, 1)
    assert report["updates_tokens_per_state"] == round(updated / states, 1)
    assert report["updates_ratio"] > report["conversation_ratio"] > report["ratio"] > 1


def _played(turns: str, seed: int = 5):
    """The teacher's PolyGuard episode of `seed` under `turns`: (that environment, its transitions, each state's
    one-state messages, the answers given)."""
    from lib.episodes import run_episode

    spec, state_env = get_spec("polyguard", {"turns": turns}), get_spec("polyguard").make_env()
    env = spec.make_env()
    transitions = run_episode(env, spec.make_policy(spec.teacher), seed, "holdout", keep_transitions=True).transitions
    states = [state_env.render(t["observation"]) for t in transitions]
    return env, transitions, states, [t["action"] for t in transitions]


def test_an_episode_under_turns_conversation_is_rendered_as_one_conversation():
    from lib.envs import EnvironmentArgsError
    from lib.envs.turns import conversation

    env, transitions, states, answers = _played("conversation")
    assert len(transitions) >= 3
    assert env.render(transitions[0]["observation"]) == states[0]
    third = env.render(transitions[2]["observation"])
    assert third == conversation(states[:3], answers[:2])
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert third[2]["content"] == answers[0] and third[3]["content"] == changed_sections(states[0], states[1])
    other = (
        get_spec("polyguard", {"turns": "conversation"}).make_env().reset(6, "holdout")
    )  # a state of another environment's episode
    with pytest.raises(ValueError, match="current episode"):
        env.render(other)
    with pytest.raises(EnvironmentArgsError, match="turns must be one of"):
        get_spec("polyguard", {"turns": "chat"})


def test_under_turns_updates_the_conversation_leaves_the_answers_out():
    """`updates` holds what the state form holds (no record of the actions taken), written as the conversation's user
    turns: each later state's prompt extends the one before it, so a kept cache still lends it."""
    from lib.envs.turns import conversation

    env, transitions, states, answers = _played("updates")
    third = env.render(transitions[2]["observation"])
    assert third == conversation(states[:3], answers[:2], with_answers=False)
    assert [m["role"] for m in third] == ["system", "user", "user", "user"]
    assert third[2]["content"] == changed_sections(states[0], states[1])
    assert not any(answer in m["content"] for m in third for answer in answers[:2])
    assert env.render(transitions[3]["observation"])[:4] == third  # the next state's prompt extends this one
