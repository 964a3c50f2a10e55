"""Your own json_tasks tasks: a JSON Lines file, one task a line, checked line by line on load.

    {"prompt": "...", "schema": {...}, "gold": {...}, "split": "train", "lookup": {"field": value}}

`prompt`, `schema` and `gold` are required; `split` ("train", "holdout" or "holdout_novel"; default "train") and
`lookup` (values the records tool reveals for fields the prompt does not show) are optional. The schema must be a
valid JSON Schema (jsonschema's `check_schema`) of an object whose fields are strings, enums of strings,
patterned strings, integers, numbers or booleans, and the gold object must be valid under it. Every split needs
at least one task (the workbook trains on `train` and evaluates on `holdout` and `holdout_novel`). A bad line is
an error naming the file, the line and what is wrong.

The values offered for each field are the gold value and distractors found in the prompt: its other numbers for
a number, its substrings matching a pattern, its labelled values and capitalised names for a string, the values
of an enum (at most `MAX_ENUM_OFFERED`), and for a string field a copy of the field's description (the
`copies_schema` trap).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from ..base import MAX_ACTION_CHARS, SPLITS, format_action
from .task import Task, dedupe, field_kind, is_of_kind, literal, normalise

KEYS = ("prompt", "schema", "gold", "split", "lookup")
REQUIRED = ("prompt", "schema", "gold")
MAX_ENUM_OFFERED = 6
MAX_DISTRACTORS = 3
FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,39}$")
INSTRUCTION = "Build the object the schema describes from the text."


class TasksFileError(ValueError):
    """A tasks file that cannot be used: the message names the file, the line and what is wrong."""


def load_tasks(path: str | Path) -> dict[str, tuple[Task, ...]]:
    """Every task of the file, by split; a `TasksFileError` at the first bad line."""
    path = Path(path)
    if not path.is_file():
        raise TasksFileError(f"tasks file {path}: no such file")
    by_split: dict[str, list[Task]] = {split: [] for split in SPLITS}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"tasks file {path}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise TasksFileError(f"{where}: not JSON ({error.msg}, column {error.colno})") from None
        split, task = parse_task(record, where, f"{path.name}:{number}")
        by_split[split].append(task)
    missing = [split for split, tasks in by_split.items() if not tasks]
    if missing:
        raise TasksFileError(
            f"tasks file {path}: no task for split {', '.join(missing)} (every split needs at least one: the "
            'workbook trains on train and evaluates on holdout and holdout_novel; give lines "split": "<split>")'
        )
    return {split: tuple(tasks) for split, tasks in by_split.items()}


def parse_task(record: Any, where: str, family: str) -> tuple[str, Task]:
    """(split, task) of one line's object, or a `TasksFileError` saying what is wrong with it."""
    if not isinstance(record, dict):
        raise TasksFileError(f"{where}: a line must be a JSON object, got {type(record).__name__}")
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        raise TasksFileError(f"{where}: missing key {', '.join(map(repr, missing))} (each line needs {REQUIRED})")
    unknown = sorted(set(record) - set(KEYS))
    if unknown:
        raise TasksFileError(f"{where}: unknown key {', '.join(map(repr, unknown))} (allowed: {KEYS})")
    prompt, schema, gold = record["prompt"], record["schema"], record["gold"]
    split, lookup = record.get("split", "train"), record.get("lookup", {})
    if not isinstance(prompt, str) or not prompt.strip():
        raise TasksFileError(f"{where}: 'prompt' must be a non-empty string")
    if split not in SPLITS:
        raise TasksFileError(f"{where}: 'split' must be one of {SPLITS}, got {split!r}")
    _check_schema(schema, where)
    properties = schema["properties"]
    if not isinstance(gold, dict):
        raise TasksFileError(f"{where}: 'gold' must be a JSON object")
    validator = validator_for(schema, default=Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(gold), key=lambda e: list(e.path))
    if errors:
        raise TasksFileError(f"{where}: gold is not valid under its schema: {errors[0].message}")
    outside = [key for key in gold if key not in properties]
    if outside:
        raise TasksFileError(f"{where}: gold has fields the schema does not define: {outside}")
    if not gold:
        raise TasksFileError(f"{where}: gold is empty (nothing to score)")
    if not isinstance(lookup, dict):
        raise TasksFileError(f"{where}: 'lookup' must be a JSON object of field: value")
    for field, value in lookup.items():
        if field not in properties:
            raise TasksFileError(f"{where}: lookup names {field!r}, which is not a field of the schema")
        if not is_of_kind(field_kind(properties[field]), value) or not _fits(properties[field], value):
            raise TasksFileError(f"{where}: lookup value {value!r} of {field!r} is not valid for that field")
    options = {name: _options(name, prop, gold.get(name), prompt) for name, prop in properties.items()}
    for name in properties:
        values = (*options[name], *([lookup[name]] if name in lookup else []))
        for value in values:
            _check_offerable(name, value, where)
    task = Task(family, _instruction(schema), prompt.strip(), schema, dict(gold), dict(lookup), options)
    return split, task


def _check_schema(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        raise TasksFileError(f"{where}: 'schema' must be a JSON object")
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as error:
        raise TasksFileError(f"{where}: schema is not a valid JSON Schema: {error.message}") from None
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), dict) or not schema["properties"]:
        raise TasksFileError(f"{where}: the schema must be an object schema with 'type': 'object' and 'properties'")
    for name, prop in schema["properties"].items():
        if not FIELD_NAME.match(name):
            raise TasksFileError(
                f"{where}: field name {name!r} cannot be offered (letters, digits, _ . -; at most 40 characters)"
            )
        if field_kind(prop) is None:
            shown = prop.get("type", "no type") if isinstance(prop, dict) else type(prop).__name__
            raise TasksFileError(
                f"{where}: field {name!r} has type {json.dumps(shown)}, which the environment cannot offer "
                "candidates for (supported: string, enum of strings, string with pattern, integer, number, boolean)"
            )


def _fits(prop: dict[str, Any], value: Any) -> bool:
    return Draft202012Validator(prop).is_valid(value)


def _check_offerable(field: str, value: Any, where: str) -> None:
    shown = literal(value)
    if isinstance(value, str) and (not value.strip() or re.search(r"[\x00-\x1f]", value)):
        raise TasksFileError(f"{where}: value {value!r} of {field!r} is empty or holds a line break or control code")
    size = len(format_action(f"set:{field}={shown}"))
    if size > MAX_ACTION_CHARS:
        raise TasksFileError(
            f"{where}: value of {field!r} is too long to offer as a candidate ({size} characters as an answer; "
            f"at most {MAX_ACTION_CHARS})"
        )


def _instruction(schema: dict[str, Any]) -> str:
    title = schema.get("title")
    return f"Build the {title} object the schema describes from the text." if isinstance(title, str) else INSTRUCTION


def _numbers(prompt: str, integers: bool) -> list[Any]:
    found = []
    for match in re.finditer(r"(?<![\w.\-])\d+(?:\.\d+)?(?![\d.]*\d)", prompt):
        text = match.group()
        if "." in text:
            if not integers:
                found.append(float(text))
        else:
            found.append(int(text))
    return found


def _strings(prompt: str) -> list[str]:
    """Labelled values (`label: value`) and capitalised names in the prompt, in text order."""
    found = []
    for segment in re.split(r"[;,|\n]|\.\s", prompt):
        label, colon, value = segment.partition(":")
        if colon and len(label.strip()) <= 25 and not re.fullmatch(r"[\d\s:.,/-]*", value):
            found.append(value.strip())
    found += re.findall(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*", prompt)
    return [s for s in found if 1 < len(s) <= 40]


def _options(name: str, prop: dict[str, Any], gold: Any, prompt: str) -> tuple[Any, ...]:
    """The gold value (when the gold object has the field) and distractors from the prompt (see the module)."""
    kind = field_kind(prop)
    head = [] if gold is None else [gold]
    if kind == "boolean":
        return (True, False)
    if kind == "enum":
        values = [v for v in prop["enum"] if v != gold][: MAX_ENUM_OFFERED - len(head)]
        variant = [m.group() for m in re.finditer(rf"\b{re.escape(gold)}\b", prompt, re.IGNORECASE)] if gold else []
        return dedupe([*head, *values, *[v for v in variant if v != gold][:1]])
    if kind in ("integer", "number"):
        others = [v for v in _numbers(prompt, kind == "integer") if v != gold]
        return dedupe([*head, *others])[: len(head) + MAX_DISTRACTORS]
    if kind == "pattern":
        body = prop["pattern"].removeprefix("^").removesuffix("$")
        try:
            others = [m.group() for m in re.finditer(body, prompt)]
        except re.error:
            others = []
        others = [v for v in others if v and v != gold]
    else:
        others = [v for v in _strings(prompt) if gold is None or normalise(v) != normalise(gold)]
    copy = prop.get("description") if 0 < len(prop.get("description", "")) <= 40 else "string"
    return dedupe([*head, *others[:MAX_DISTRACTORS], copy])
