"""json_tasks' one prompt renderer: an observation becomes the chat messages a model sees.

SFT data, GRPO rollouts, evaluation and post-save inference all call `render`; `JsonTasksEnv.render` is it. The
schema is shown compactly, one line per field (its type, enum values or pattern, default and description), with
the object built so far as JSON.
"""

from __future__ import annotations

import json
from typing import Any

from ..base import candidate_lines
from .observation import Observation
from .task import literal

SYSTEM_PROMPT = (
    "You build a JSON object that must validate under the schema shown, one field per step, from the text. "
    "set:<field>=<value> sets a field (set it again to change it); lookup:<field> asks the records tool for a "
    "value the text does not give (one step); submit hands the object in. The score: the object validates "
    "(required fields, types, enum values, patterns, no other fields), each field matches the truth (an object "
    "that fails the schema earns nothing for its fields), and fewer steps. Copying the schema's own words as a "
    "value ends the task with nothing. "
    'Answer with one JSON object: {"action": "<candidate>"}'
)

# The fixed words of the user message and of the "Last:" notes, for the tokenizer's vocabulary (`vocabulary()`
# in __init__.py); a test checks that every word a prompt shows is covered.
TEMPLATE_WORDS = (
    "Text Schema object marks a required field no other fields one of string matching integer number boolean "
    "default true false minimum maximum Looked up Object so far Step of last task started set to looked "
    "invalid answer step used Candidates lookup submit Empty none"
)


def field_line(name: str, prop: dict[str, Any], required: bool) -> str:
    """One schema field: `- name*: type or enum or pattern; default; description`."""
    if "enum" in prop:
        kind = "one of " + ", ".join(prop["enum"])
    elif "pattern" in prop:
        kind = f"string matching {prop['pattern']}"
    else:
        kind = prop.get("type", "string")
    parts = [kind]
    for key in ("minimum", "maximum"):
        if key in prop:
            parts.append(f"{key} {literal(prop[key])}")
    if "default" in prop:
        parts.append(f"default {literal(prop['default'])}")
    if prop.get("description"):
        parts.append(prop["description"])
    return f"- {name}{'*' if required else ''}: {'; '.join(parts)}"


def schema_lines(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    title = f" {schema['title']}" if schema.get("title") else ""
    lines = [f"Schema{title}: object, * marks a required field, no other fields"]
    lines += [field_line(name, prop, name in required) for name, prop in schema["properties"].items()]
    return lines


def empty_fields(observation: Observation) -> list[str]:
    """The schema's fields the object does not have yet, in schema order."""
    have = {name for name, _ in observation.obj}
    return [name for name in observation.schema["properties"] if name not in have]


def render(observation: Observation, list_candidates: bool = True) -> list[dict[str, str]]:
    """The one prompt renderer: SFT data, GRPO rollouts, evaluation and post-save inference all call it."""
    o = observation
    lines = [o.instruction, f"Text: {o.prompt}", *schema_lines(o.schema)]
    if o.looked_up:
        lines.append("Looked up: " + "; ".join(f"{name} = {literal(value)}" for name, value in o.looked_up))
    lines.append(f"Object so far: {json.dumps(dict(o.obj))}")
    # the same fact as the object's keys, restated per field: a small learner finds the next field to fill here
    # without comparing the object against the schema line by line
    lines.append("Empty fields: " + (", ".join(empty_fields(o)) or "none"))
    lines.append(f"Step {o.step} of {o.budget}; last: {o.last}")
    lines += candidate_lines(o.candidates, list_candidates)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]
