"""json_tasks' reward: named components and their weights, defined once.

The environment calls `terminal_components` when an episode ends (submitted, or out of step budget: then the
object is scored as it stands); training (GRPO step mode) and evaluation both read the environment's return.
Legal steps earn 0 on the way; the return is clamped to [0, 1].

- valid: 1 when the object validates under the task's schema with `jsonschema` (required fields present, types,
  enums, patterns) and has no field the schema does not define.
- fields: the share of the gold fields the object gets right (exact for enums, integers, numbers and booleans;
  case-folded, whitespace-collapsed, end-punctuation-stripped for other strings; a missing field counts wrong),
  and only when the object is valid: an object that fails its schema is rejected downstream, so none of its
  fields is used.
- efficiency: fields x min(1, needed / steps), where needed = gold fields + looked-up fields + 1 (the submit).
- anti_cheat: -1 when the episode hit a rule (`copies_schema`): every other component is then 0, so the return is 0.
"""

from __future__ import annotations

from typing import Any

from .task import Task

# The one place the weights live. Positive weights sum to 1, so a perfect episode returns 1.0.
WEIGHTS = {"valid": 0.25, "fields": 0.65, "efficiency": 0.10, "anti_cheat": 1.0}
ANTI_CHEAT_PENALTY = 1.0
INVALID_PENALTY = -0.1  # step reward of any invalid answer; every legal episode return is >= 0


def terminal_components(task: Task, obj: dict[str, Any], steps: int, exploit: str | None) -> dict[str, float]:
    """Components of an ended episode.

    >>> from .task import Task
    >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    >>> task = Task("t", "", "n is 3", schema, {"n": 3}, {}, {"n": (3, 4)})
    >>> terminal_components(task, {"n": 3}, 2, None)
    {'valid': 1.0, 'fields': 1.0, 'efficiency': 1.0, 'anti_cheat': 0.0}
    >>> terminal_components(task, {}, 1, None)["valid"], terminal_components(task, {"n": 3}, 2, "copies_schema")
    (0.0, {'valid': 0.0, 'fields': 0.0, 'efficiency': 0.0, 'anti_cheat': -1.0})
    """
    if exploit:
        return {"valid": 0.0, "fields": 0.0, "efficiency": 0.0, "anti_cheat": -ANTI_CHEAT_PENALTY}
    valid = task.is_valid(obj)
    fields = task.field_share(obj) if valid else 0.0
    needed = len(task.gold) + len(task.lookup) + 1
    return {
        "valid": float(valid),
        "fields": fields,
        "efficiency": fields * min(1.0, needed / max(1, steps)),
        "anti_cheat": 0.0,
    }
