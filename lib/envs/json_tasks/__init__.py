"""json_tasks, schema-bound structured output (README.md here; DATA.md for where the tasks come from).

`SPEC` plays the built-in generator's tasks; `make_spec(tasks="path.jsonl")` plays the tasks of your own file
(`env_args: {tasks: path.jsonl}` in a run's config; `lib.envs.get_spec("json_tasks", env_args)` passes them here).
"""

from __future__ import annotations

import re
from functools import partial

from ..spec import EnvSpec
from .attacks import ANTI_CHEAT_RULES, HARMFUL_ATTACKS
from .env import JsonTasksEnv
from .policies import POLICIES, ROLES
from .render import SYSTEM_PROMPT, TEMPLATE_WORDS, render, schema_lines
from .scenario import vocabulary_text
from .task import Task, literal
from .tasks_file import TasksFileError, load_tasks

DESCRIPTION = (
    "Schema-bound structured output, built one field at a time from offered candidates (look a value up, set it, "
    "submit) and validated with jsonschema; synthetic records and tool-call requests"
)


def _words(tasks: list[Task]) -> str:
    """Every text a prompt or a candidate of these tasks can show."""
    parts = []
    for task in tasks:
        parts += [task.instruction, task.prompt, *schema_lines(task.schema)]
        parts += [f"{f} {literal(v)}" for f, values in task.options.items() for v in values]
        parts += [f"{f} {literal(v)}" for f, v in (*task.lookup.items(), *task.extras)]
    return "\n".join(parts)


def _distinct(text: str) -> str:
    """Each word, digit and symbol of `text` once, sorted (numbers are made of the digits)."""
    return " ".join(sorted(set(re.findall(r"[A-Za-z]+|[^\sA-Za-z]", text))))


def vocabulary() -> str:
    """Every word and name the built-in tasks' prompts can show (the tiny tokenizer's extra text)."""
    return "\n".join((SYSTEM_PROMPT, TEMPLATE_WORDS, _distinct(vocabulary_text())))


def make_spec(tasks: str | None = None) -> EnvSpec:
    """The spec of the built-in tasks, or (`tasks`: a JSON Lines file, see `tasks_file`) of the file's tasks."""
    if tasks is None:
        return SPEC
    loaded = load_tasks(tasks)
    words = "\n".join((SYSTEM_PROMPT, TEMPLATE_WORDS, _distinct(_words([t for s in loaded.values() for t in s]))))
    return EnvSpec(
        name="json_tasks",
        make_env=partial(JsonTasksEnv, loaded, str(tasks)),
        policies=POLICIES,
        roles=ROLES,
        anti_cheat_rules=ANTI_CHEAT_RULES,
        harmful_attacks=HARMFUL_ATTACKS,
        vocabulary=lambda: words,
        description=DESCRIPTION,
    )


SPEC = EnvSpec(
    name="json_tasks",
    make_env=JsonTasksEnv,
    policies=POLICIES,
    roles=ROLES,
    anti_cheat_rules=ANTI_CHEAT_RULES,
    harmful_attacks=HARMFUL_ATTACKS,
    vocabulary=vocabulary,
    description=DESCRIPTION,
)

__all__ = ["SPEC", "JsonTasksEnv", "TasksFileError", "make_spec", "render"]
