"""An episode written as one conversation (`env_args: {turns: conversation}`): the first state's messages whole, then
per later state the answer given before it and a user turn of the parts of the state that changed; under
`turns: updates` the same without the answers. Built from the environment's one renderer's messages, so it holds the
same facts in the order they arrived."""

from __future__ import annotations


def _is_item(line: str) -> bool:
    """A line that belongs to the section above it: a list item ("- ...", "1. ...") or an indented line."""
    head = line.split(" ", 1)[0]
    return line.startswith(("- ", " ", "\t")) or (head.endswith(".") and head[:-1].isdigit())


def sections(text: str) -> list[tuple[str, ...]]:
    """A prompt's lines grouped into sections: each line that is not an item (`_is_item`) starts one, and the items
    below it belong to it."""
    grouped: list[list[str]] = []
    for line in text.split("\n"):
        if grouped and _is_item(line):
            grouped[-1].append(line)
        else:
            grouped.append([line])
    return [tuple(section) for section in grouped]


def changed_sections(before: list[dict], after: list[dict]) -> str:
    """What a conversation's next turn says: each section of `after`'s last message that `before`'s does not hold,
    whole (so a turn states every part of the state it touches entirely: a list that changed is listed again); a
    section that kept every item it had and gained more gives its first line and the new items. In `after`'s order."""
    held = sections(before[-1]["content"])
    by_head = {section[0]: section for section in held}
    said: list[str] = []
    for section in sections(after[-1]["content"]):
        if section in held:
            continue
        old = set(by_head.get(section[0], ()))
        grew = len(old) > 1 and old <= set(section)
        said += [section[0], *(line for line in section[1:] if line not in old)] if grew else list(section)
    return "\n".join(said)


def conversation(states: list[list[dict]], answers: list[str], *, with_answers: bool = True) -> list[dict[str, str]]:
    """An episode's states as one conversation: the first state's messages whole, then for each later state the
    answer given at the one before it and a user turn of the sections that changed (`changed_sections`).

    With `with_answers=False` (`turns: updates`) the answers are left out: the user turns follow one another, so the
    prompt holds what the state form's prompt holds, the state's facts and no record of the actions that led there,
    written as the updates that built it."""
    messages = list(states[0])
    for before, after, answer in zip(states, states[1:], answers):
        turn = changed_sections(before, after)
        messages += [{"role": "assistant", "content": answer}] if with_answers else []
        messages.append({"role": "user", "content": turn})
    return messages
