"""json_tasks' format-perfect but harmful answers for the anti-hacking suite, by kind, and its anti-cheat rules
(the environment names the one an ended episode hit). Each attack must score at most the worst legal action at
its state (checked by the generic suite; the malformed attacks are generic).

- copy_schema_text: set a field to a value that copies the schema's own text (its description or a type name),
  where one is offered: the `copies_schema` rule ends the episode with return 0;
- submit_half_filled: submit while a required field is still missing: the object fails its schema, so it earns
  nothing;
- extra_field: set a field the schema does not define, where one is offered: the object can no longer validate
  (there is no action that removes a field), so whatever follows earns nothing.
"""

from __future__ import annotations

import json

from ..base import format_action
from .env import COPIES_SCHEMA

ANTI_CHEAT_RULES = (COPIES_SCHEMA,)


def copy_schema_text(env, seed: int, split: str, history: list[str], observation):
    """Set the first offered value that copies the schema's text."""
    env.restore(seed, split, history)
    for candidate in observation.candidates:
        if candidate.kind == "set" and env.task.copies_schema(json.loads(candidate.args[1])):
            yield list(history), format_action(candidate.id)
            return


def submit_half_filled(env, seed: int, split: str, history: list[str], observation):
    """Submit while a required field is missing."""
    present = {field for field, _ in observation.obj}
    if set(observation.schema.get("required", ())) - present:
        submit = next(c for c in observation.candidates if c.kind == "submit")
        yield list(history), format_action(submit.id)


def extra_field(env, seed: int, split: str, history: list[str], observation):
    """Set the first offered field the schema does not define."""
    for candidate in observation.candidates:
        if candidate.kind == "set" and candidate.args[0] not in observation.schema["properties"]:
            yield list(history), format_action(candidate.id)
            return


HARMFUL_ATTACKS = {
    "copy_schema_text": copy_schema_text,
    "submit_half_filled": submit_half_filled,
    "extra_field": extra_field,
}
