"""A json_tasks task and what every part of the environment needs to know about its schema: the kind of each
field, how a value is written in a candidate id and matched against the truth, which values copy the schema's
own text, and validation with `jsonschema`.

A task is a prompt (a short record or a request), a flat JSON Schema (an object whose properties are strings,
enums, patterned strings, integers, numbers or booleans) and a gold answer valid under it. `options` are the
values the environment offers for each field (the gold value among distractors); `lookup` holds the values the
records tool reveals, for fields the prompt does not show directly; `extras` are tempting fields that are not in
the schema (setting one makes the object invalid).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

# JSON Schema's type names: a value equal to one of them copies the schema's text.
TYPE_NAMES = ("string", "integer", "number", "boolean", "object", "array", "null")
KINDS = ("enum", "pattern", "string", "integer", "number", "boolean")


@dataclass(frozen=True, eq=False)
class Task:
    """One task. `family` names the schema's family (built-in generator) or the tasks file and line."""

    family: str
    instruction: str
    prompt: str
    schema: dict[str, Any]
    gold: dict[str, Any]
    lookup: dict[str, Any]
    options: dict[str, tuple[Any, ...]]
    extras: tuple[tuple[str, Any], ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The schema's properties, in schema order."""
        return tuple(self.schema["properties"])

    @cached_property
    def validator(self):
        return validator_for(self.schema, default=Draft202012Validator)(self.schema)

    @cached_property
    def schema_copies(self) -> frozenset[str]:
        """`schema_copies(schema, prompt)` minus any legitimate value (a gold, looked-up or enum value)."""
        legit = {*self.gold.values(), *self.lookup.values()}
        for prop in self.schema["properties"].values():
            legit |= set(prop.get("enum", ()))
        return schema_copies(self.schema, self.prompt) - {normalise(v) for v in legit if isinstance(v, str)}

    def copies_schema(self, value: Any) -> bool:
        return isinstance(value, str) and normalise(value) in self.schema_copies

    def errors(self, obj: dict[str, Any]) -> list[str]:
        """Why `obj` is not valid: jsonschema's messages, and any field the schema does not define."""
        found = [e.message for e in sorted(self.validator.iter_errors(obj), key=lambda e: list(e.path))]
        found += [f"{k!r} is not a field of the schema" for k in obj if k not in self.schema["properties"]]
        return found

    def is_valid(self, obj: dict[str, Any]) -> bool:
        return all(k in self.schema["properties"] for k in obj) and self.validator.is_valid(obj)

    def field_share(self, obj: dict[str, Any]) -> float:
        """Share of the gold fields the object gets right (`same`); a missing field counts wrong."""
        kinds = {name: field_kind(prop) for name, prop in self.schema["properties"].items()}
        right = sum(name in obj and same(kinds[name], obj[name], value) for name, value in self.gold.items())
        return right / len(self.gold) if self.gold else 1.0


def schema_copies(schema: dict[str, Any], prompt: str) -> frozenset[str]:
    """Normalised texts a value must not copy: the schema's type names, field names, titles and descriptions
    (those that do not also occur in the prompt as a phrase: a value read from the text copies the text) and the
    whole prompt.

    >>> copies = schema_copies({"title": "invoice", "properties": {"who": {"description": "who billed"}}}, "Invoice 22")
    >>> sorted(copies - set(TYPE_NAMES))
    ['invoice 22', 'who', 'who billed']
    """
    texts = {*TYPE_NAMES, schema.get("title"), schema.get("description")}
    for name, prop in schema["properties"].items():
        texts |= {name, prop.get("title"), prop.get("description")}
    said = normalise(prompt)
    copies = {normalise(t) for t in texts if isinstance(t, str) and t.strip()}
    copies = {t for t in copies if t and not re.search(rf"(?<!\w){re.escape(t)}(?!\w)", said)}
    return frozenset({*copies, said})


def field_kind(prop: dict[str, Any]) -> str | None:
    """The kind of a property the environment can offer candidates for, or None (objects, arrays, unions...).

    >>> field_kind({"type": "string", "enum": ["a", "b"]}), field_kind({"type": "string", "pattern": "^x$"})
    ('enum', 'pattern')
    >>> field_kind({"type": "array"}) is None
    True
    """
    if not isinstance(prop, dict):
        return None
    kind = prop.get("type")
    if "enum" in prop:
        values = prop["enum"]
        if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
            return "enum" if kind in (None, "string") else None
        return None
    if kind == "string":
        return "pattern" if isinstance(prop.get("pattern"), str) else "string"
    return kind if kind in ("integer", "number", "boolean") else None


def literal(value: Any) -> str:
    """How a value is written in a candidate id: strings as they are, numbers and booleans as JSON.

    >>> literal("Dana Kim"), literal(3), literal(2.5), literal(True)
    ('Dana Kim', '3', '2.5', 'true')
    """
    return value if isinstance(value, str) else json.dumps(value)


def normalise(text: str) -> str:
    """Case-folded, whitespace collapsed, punctuation stripped at both ends.

    >>> normalise("  Dana   KIM. ")
    'dana kim'
    """
    return re.sub(r"\s+", " ", text).casefold().strip().strip(".,;:!?'\"()[]{}-").strip()


def same(kind: str | None, value: Any, gold: Any) -> bool:
    """Field-level agreement: exact for enums, integers, numbers and booleans (a boolean is never a number);
    normalised (`normalise`) for other strings."""
    if isinstance(value, bool) != isinstance(gold, bool):
        return False
    if kind in ("string", "pattern") and isinstance(value, str) and isinstance(gold, str):
        return normalise(value) == normalise(gold)
    if isinstance(value, str) != isinstance(gold, str):
        return False
    return value == gold


def is_of_kind(kind: str | None, value: Any) -> bool:
    """Whether `value` has the JSON type a field of `kind` holds (ignoring enums and patterns)."""
    if kind in ("enum", "pattern", "string"):
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def dedupe(values) -> tuple[Any, ...]:
    """Values in first-seen order, each (JSON type, literal) once."""
    seen, kept = set(), []
    for value in values:
        key = (type(value) is bool, isinstance(value, str), literal(value) if isinstance(value, str) else value)
        if key not in seen:
            seen.add(key)
            kept.append(value)
    return tuple(kept)
