"""json_tasks: schema-bound structured output, built one field at a time from offered candidates.

Used by `python -m lib baselines`, the corpus, GRPO rewards and evaluation (through `SPEC`). Each step shows the
task's text, its schema (one line per field), what the records tool has returned, the object built so far and a
shuffled set of candidate actions with ids: `set:<field>=<value>` for each field's plausible values,
`lookup:<field>` where the records tool knows a field the text does not show, and `submit`. The policy answers
with one JSON object naming a candidate.
"""

from __future__ import annotations

import json
from typing import Any

from ..base import Candidate, Environment
from .observation import Observation
from .render import render
from .reward import INVALID_PENALTY, WEIGHTS, terminal_components
from .scenario import generate
from .task import Task, literal

COPIES_SCHEMA = "copies_schema"


def budget_of(task: Task) -> int:
    """Steps an episode may take: two per field, one per lookup and two more."""
    return 2 * len(task.fields) + len(task.lookup) + 2


class JsonTasksEnv(Environment):
    """The built-in generator's tasks, or, with `tasks` (the split -> tasks of a tasks file, see `tasks_file`),
    the task `seed % n` of the episode's split."""

    name = "json_tasks"
    invalid_penalty = INVALID_PENALTY
    weights = WEIGHTS
    renderer = staticmethod(render)

    def __init__(self, tasks: dict[str, tuple[Task, ...]] | None = None, source: str = ""):
        self.tasks, self.source = tasks, source

    # ---- the episode (the base class runs reset and step) ---------------------------------------
    def _begin(self, internal_seed: int) -> None:
        if self.tasks is None:
            self.task = generate(internal_seed, novel=self.split == "holdout_novel")
        else:
            pool = self.tasks.get(self.split, ())
            if not pool:
                raise ValueError(f"tasks file {self.source}: no task for split {self.split!r}")
            self.task = pool[self.seed % len(pool)]
        self.budget = budget_of(self.task)
        self.obj: dict[str, Any] = {}
        self.looked_up: dict[str, Any] = {}
        self._offered: dict[tuple, list[Candidate]] = {}
        self._last = "task started"

    def _on_invalid(self) -> None:
        self._last = "invalid answer, one step used"

    def _apply(self, candidate: Candidate, info: dict[str, Any]) -> tuple[str | None, str | None]:
        kind = candidate.kind
        if kind == "submit":
            self._last = "submitted"
            return None, "submit"
        field = candidate.args[0]
        if kind == "lookup":
            self.looked_up[field] = self.task.lookup[field]
            self._last = f"looked up {field}"
            return None, None
        value = json.loads(candidate.args[1])
        if self.task.copies_schema(value):
            self._last = f"set {field} to a copy of the schema"
            return COPIES_SCHEMA, None
        self.obj[field] = value
        self._last = f"set {field} to {literal(value)}"
        return None, None

    def _score(self, exploit: str | None) -> dict[str, float]:
        return terminal_components(self.task, self.obj, self._steps, exploit)

    def _end_info(self, info: dict[str, Any], end_reason: str) -> None:
        info["submitted"] = self._ordered_obj()
        info["schema_errors"] = self.task.errors(self.obj)[:5]

    def _hidden(self) -> dict[str, Any]:
        """HIDDEN state: the gold object and the records tool's values."""
        t = self.task
        return {
            "budget": self.budget,
            "family": t.family,
            "schema": t.schema,
            "gold": dict(t.gold),
            "lookup": dict(t.lookup),
            "object": self._ordered_obj(),
            "looked_up": dict(self.looked_up),
        }

    # ---- hidden state (the oracle may read it; models may not) ---------------------------------------
    @property
    def gold(self) -> dict[str, Any]:
        return dict(self.task.gold)

    # ---- observation ----------------------------------------------------------------------------
    def offered_values(self, field: str) -> tuple[Any, ...]:
        """The values offered for `field` now: a field the records tool knows offers its gold value only once
        looked up (unless another option is that value, as an enum's is)."""
        t = self.task
        values = t.options[field]
        if field in t.lookup and field not in self.looked_up:
            prop = t.schema["properties"][field]
            if "enum" not in prop and prop.get("type") != "boolean":
                hidden = [t.lookup[field], t.gold.get(field)]
                values = tuple(v for v in values if not any(_identical(v, h) for h in hidden))
        elif field in self.looked_up and not any(_identical(v, self.looked_up[field]) for v in values):
            values = (*values, self.looked_up[field])
        return values

    def _candidates(self) -> tuple[Candidate, ...]:
        """Ids name the action (`set:quantity=12`, `lookup:customer_tier`, `submit`); the list is shuffled per
        step from the internal seed and the step number, so position carries no meaning."""
        key = tuple(self.looked_up)
        if key not in self._offered:  # the offer changes only when the records tool answers
            t = self.task
            found = [_set(field, value) for field in t.fields for value in self.offered_values(field)]
            found += [_set(field, value) for field, value in t.extras]
            found += [
                Candidate(f"lookup:{f}", "lookup", (f,), f"ask the records tool for {f}")
                for f in t.lookup
                if f not in self.looked_up
            ]
            found.append(Candidate("submit", "submit", (), "hand the object in"))
            self._offered[key] = found
        return self._shuffled(list(self._offered[key]))

    def _ordered_obj(self) -> dict[str, Any]:
        fields = self.task.fields
        ordered = {f: self.obj[f] for f in fields if f in self.obj}
        return ordered | {k: v for k, v in self.obj.items() if k not in ordered}

    def _observe(self) -> Observation:
        t = self.task
        return Observation(
            instruction=t.instruction,
            prompt=t.prompt,
            schema=t.schema,
            obj=tuple(self._ordered_obj().items()),
            looked_up=tuple(self.looked_up.items()),
            step=self._steps,
            budget=self.budget,
            last=self._last,
            candidates=self._candidates(),
        )


def _identical(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _set(field: str, value: Any) -> Candidate:
    shown = literal(value)
    return Candidate(f"set:{field}={shown}", "set", (field, json.dumps(value)), f"set {field} to {shown}")
