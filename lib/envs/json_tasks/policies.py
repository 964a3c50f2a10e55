"""json_tasks' scripted policies: the rule-based keyword extractor (the SFT teacher), the oracle (reads the gold
object), the prompt-only expert and the trivial ones. Every policy answers with the canonical action text, like a
model would; all are deterministic given the observation. Listed in `SPEC.policies`.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

from ..base import Policy, format_action
from ..policies import by_key
from .scenario import AIRPORTS, MONTHS
from .task import field_kind, literal, normalise, schema_copies

STOPWORDS = frozenset("a an the of in as for and or is by on at with per be it this that".split())
NEGATION = re.compile(r"\b(no|none|false|not)\b", re.IGNORECASE)
CLAUSE_END = re.compile(r";|\.(?:\s|$)|\n")


# ---- what every policy reads from an observation ---------------------------------------------------------------------
def offered(observation, field: str) -> list[Any]:
    """The values offered for `field`, in candidate order."""
    return [json.loads(c.args[1]) for c in observation.candidates if c.kind == "set" and c.args[0] == field]


def identical(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def set_action(observation, field: str, value: Any) -> str:
    return format_action(by_key(observation, ("set", field, json.dumps(value))).id)


def submit(observation) -> str:
    return format_action(by_key(observation, ("submit",)).id)


def fill_then_submit(observation, desired: dict[str, Any], *, overwrite: bool = False) -> str:
    """Set the first empty schema field (in schema order) to its `desired` value; submit when none is left. A field
    whose desired value is None or not offered is left empty.

    A field that is already set keeps its value (unless `overwrite`, the oracle's way: it corrects every field that
    is not gold). Alone, a policy sets each field once, so this changes nothing it does; it matters when a policy
    finishes an episode somebody else began, as the teacher does for the improver and for step-mode GRPO's reward.
    There a teacher that rewrote every field to its own choice would undo the very answer being scored: the
    improver measured exactly the teacher's 0.799 on 60 holdout seeds that way, and 0.968 with fields kept."""
    current = dict(observation.obj)
    for field in observation.schema["properties"]:
        value = desired.get(field)
        if value is None or (field in current and (not overwrite or identical(current[field], value))):
            continue
        if any(identical(value, v) for v in offered(observation, field)):
            return set_action(observation, field, value)
    return submit(observation)


def _sort_key(value: Any) -> tuple:
    return (str(type(value)), literal(value))


# ---- the rule-based extractor -------------------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def _validator(prop_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(prop_json))


def fits(prop: dict[str, Any], value: Any) -> bool:
    """Whether `value` satisfies the field's own schema (type, enum, pattern)."""
    return _validator(json.dumps(prop, sort_keys=True)).is_valid(value)


def cues(field: str, prop: dict[str, Any]) -> tuple[str, ...]:
    """The keywords the extractor looks for: the words of the field's name and description.

    >>> cues("ship_date", {"description": "dispatch day"})
    ('ship', 'date', 'dispatch', 'day')
    """
    words = re.findall(r"[a-z]+", f"{field.replace('_', ' ')} {prop.get('description', '')}".lower())
    return tuple(dict.fromkeys(w for w in words if w not in STOPWORDS and len(w) >= 2))


def first_cue(text: str, words: tuple[str, ...]) -> re.Match | None:
    """The earliest whole-word occurrence of any keyword (case-insensitive)."""
    found = [m for w in words if (m := re.search(rf"\b{re.escape(w)}\b", text, re.IGNORECASE))]
    return min(found, key=lambda m: m.start()) if found else None


def occurrences(value: Any, text: str, case_sensitive: bool = False) -> list[int]:
    """Where a value's surface form occurs in the text: a string as a whole phrase (case-insensitive unless
    asked), a number as a whole number (so "85" occurs in "85k" but not in "850" or "ORD-85")."""
    if isinstance(value, bool):
        return []
    if isinstance(value, str):
        pattern = rf"(?<!\w){re.escape(value)}(?!\w)"
        return [m.start() for m in re.finditer(pattern, text, 0 if case_sensitive else re.IGNORECASE)]
    pattern = rf"(?<![\w.\-]){re.escape(literal(value))}(?!\d|\.\d|-\d)"
    return [m.start() for m in re.finditer(pattern, text)]


def extract(field: str, prop: dict[str, Any], values: list[Any], text: str, schema_words=frozenset()) -> Any:
    """The extractor's value for one field, from the offered `values` that satisfy the field's schema and do not
    copy the schema's text (`schema_words`, normalised):

    - a boolean is true when a keyword occurs and no "no", "none", "false" or "not" follows it in its clause;
    - otherwise the first value occurring after the first keyword, else the last one before it (with no keyword
      in the text: the first value occurring anywhere; the longest of values starting at the same place);
    - else the schema's default, else the first value in sorted order.

    Its blind spots are those of such extractors: synonyms ("overnight" is not "express"), arithmetic ("3 packs
    of 6"), the first number after a label ("5.5 lb (2.5 kg)"), a negation before the keyword ("no gift wrap"), a
    date in words, a second value of the same type nearer the label; it never asks the records tool."""
    words = cues(field, prop)
    cue = first_cue(text, words)
    if field_kind(prop) == "boolean":
        if cue is None:
            return False
        rest = text[cue.end() :]
        end = CLAUSE_END.search(rest)
        return not NEGATION.search(rest[: end.start()] if end else rest)
    pool = [v for v in values if fits(prop, v) and not (isinstance(v, str) and normalise(v) in schema_words)]
    if not pool:
        return None
    found = [(position, -len(literal(v)), v) for v in pool for position in occurrences(v, text)]
    if cue is not None:
        after = [f for f in found if f[0] >= cue.end()]
        if after:
            return min(after, key=lambda f: f[:2])[2]
        before = [f for f in found if f[0] < cue.start()]
        if before:
            return max(before, key=lambda f: (f[0], -f[1]))[2]
    elif found:
        return min(found, key=lambda f: f[:2])[2]
    default = prop.get("default")
    if any(identical(default, v) for v in pool):
        return default
    return sorted(pool, key=_sort_key)[0]


def extracted(observation, text: str) -> dict[str, Any]:
    """`extract` of every schema field from `text` (computed once per text, schema and set of offered values)."""
    keys = tuple(c.key for c in observation.candidates if c.kind == "set")
    return dict(_extracted(text, observation.prompt, json.dumps(observation.schema), tuple(sorted(keys))))


@lru_cache(maxsize=4096)
def _extracted(text: str, prompt: str, schema_json: str, keys: tuple) -> tuple[tuple[str, Any], ...]:
    schema = json.loads(schema_json)
    words = schema_copies(schema, prompt)
    values: dict[str, list] = {}
    for _, field, value in keys:
        values.setdefault(field, []).append(json.loads(value))
    return tuple((f, extract(f, p, values.get(f, []), text, words)) for f, p in schema["properties"].items())


class HeuristicExtractor(Policy):
    """The SFT teacher: a rule-based keyword extractor (`extract`) over the text, field by field in schema
    order, then submit. It reads only the observation and never asks the records tool."""

    name = "heuristic"

    def act(self, observation, env):
        return fill_then_submit(observation, extracted(observation, observation.prompt))


# What the expert knows that the keyword extractor does not, as rewrites of the text into the plain "label: value"
# form: arithmetic, units, synonyms of labels and values, negations, dates in words, airports by city.
_N = r"(\d+)"
_ORD = r"(\d+)(?:st|nd|rd|th)"
REWRITES: tuple[tuple[str, Any], ...] = (
    (rf"{_N} packs? of {_N}", lambda m: str(int(m[1]) * int(m[2]))),
    (rf"{_N} adults? (?:and|plus) {_N} kids?", lambda m: f"{int(m[1]) + int(m[2])} people"),
    (rf"hiring {_N} engineers? and {_N} designers?", lambda m: f"openings: {int(m[1]) + int(m[2])}"),
    (rf"from the {_ORD} to the {_ORD}", lambda m: f"{int(m[2]) - int(m[1])} nights"),
    (rf"{_N}k-{_N}k", lambda m: f"{int(m[1]) * 1000} to {int(m[2]) * 1000}"),
    (r"[\d.]+ lb \(([\d.]+) kg\)", r"\1 kg"),
    (r"[\d.]+ F \(([\d.]+) C\)", r"\1 C"),
    (r"\bHR (\d+)", r"heart rate: \1"),
    (r"(\d+) yo\b", r"age: \1"),
    (r"\bno (?:known )?([a-z]+(?: wrap)?) (?:needed|work)\b|\bno known (allergies)\b", r"\1\2: no"),
    (r"\bnon-refundable\b", "refundable: no"),
    (r"please add a ribbon", "gift wrap: yes"),
    (r"allergic to", "allergies:"),
    (r"must be able to cancel", "refundable: yes"),
    (r"work from home is fine", "remote: yes"),
    (r"morning meal", "breakfast: yes"),
    (r"overnight delivery", "express"),
    (r"regular post", "standard"),
    (r"slowest cheapest post", "economy"),
    (r"non-urgent follow-up", "routine"),
    (r"needs to be seen ASAP", "urgent"),
    (r"critical, resus bay", "emergency"),
    (r"coach seats", "economy"),
    (r"extra legroom seats", "premium"),
    (r"lie-flat seats", "business"),
    (r"the best cabin there is", "first"),
    (r"entry-level", "junior"),
    (r"a few years in", "mid"),
    (r"\d+\+ years, leads the team", "senior"),
    (r"one bed just for me", "single"),
    (r"a king bed", "double"),
    (r"separate living area", "suite"),
    (r"\b(last|next) visit\b", r"\1 appointment"),
    (r"leaves the warehouse", "ship date:"),
    (r"seen on", "visit date:"),
    (r"flying out", "travel date:"),
    (r"\bstarting\b", "start date:"),
    (r"\barriving\b", "check in:"),
    (r"deliver to", "recipient:"),
    (r"seen today:", "patient:"),
    (r"we are hiring an? ", "title: "),
    (r"\bjoin ", "company: "),
    (r"\bto (\d+ [A-Z][a-z]+ (?:St|Ave|Rd|Dr)), ([A-Z][a-z]+)", r"city: \2, \1"),
    (r"need a room ([a-z ]+?) in ([A-Z][a-z]+)", r"need a room \1; hotel in \2"),
)


@lru_cache(maxsize=4096)
def plain(text: str) -> str:
    """The text with `REWRITES` applied, dates in words written as ISO dates and cities as their airports.

    >>> plain("quantity: 3 packs of 6 mugs; leaves the warehouse March 4, 2025; from Boston to DEN")
    'quantity: 18 mugs; ship date: 2025-03-04; from BOS to DEN'
    """
    for pattern, replacement in REWRITES:
        text = re.sub(pattern, replacement, text)
    months = "|".join(MONTHS)
    text = re.sub(rf"\b({months}) (\d+), (\d{{4}})", lambda m: _iso(m[3], m[1], m[2]), text)
    text = re.sub(rf"\b(\d+) ({'|'.join(m[:3] for m in MONTHS)}) (\d{{4}})", lambda m: _iso(m[3], m[2], m[1]), text)
    for code, city in AIRPORTS.items():
        text = re.sub(rf"\b(from|to) {city}\b", rf"\1 {code}", text)
    return text


def _iso(year: str, month: str, day: str) -> str:
    number = next(i for i, name in enumerate(MONTHS, start=1) if name.startswith(month))
    return f"{year}-{number:02d}-{int(day):02d}"


class EvidenceExpert(Policy):
    """Reads ONLY the observation (no hidden state): asks the records tool for every field it offers, then
    extracts like the teacher from the text rewritten into plain form (`plain`: arithmetic, units, synonyms,
    negations, dates in words, airports by city), and reads a patterned code by its digits (`_by_digits`). It
    shows that the teacher-to-oracle headroom is learnable from what the prompt shows."""

    name = "evidence_expert"

    def act(self, observation, env):
        lookup = next((c for c in observation.candidates if c.kind == "lookup"), None)
        if lookup is not None:
            return format_action(lookup.id)
        text = plain(observation.prompt)
        desired = extracted(observation, text)
        looked_up = dict(observation.looked_up)
        for field, prop in observation.schema["properties"].items():
            if field in looked_up:
                desired[field] = looked_up[field]
            elif field_kind(prop) == "pattern":
                desired[field] = _by_digits(field, prop, offered(observation, field), text) or desired[field]
        return fill_then_submit(observation, desired)


def _by_digits(field: str, prop: dict[str, Any], values: list[Any], text: str) -> Any:
    """For a patterned field: the valid value whose digits (one run of 3 or more) occur first after the field's
    keyword, else first anywhere, so "Order no. 48213; replaces order ORD-51120" gives `ORD-48213`; None when no
    value's digits occur."""
    cue = first_cue(text, cues(field, prop))
    found = []
    for value in (v for v in values if isinstance(v, str) and fits(prop, v)):
        digits = re.sub(r"\D", "", value)
        if len(digits) >= 3 and not re.search(r"\d\D+\d", value):
            found += [(m.start(), value) for m in re.finditer(rf"(?<!\d){digits}(?!\d)", text)]
    after = [f for f in found if cue is not None and f[0] >= cue.end()]
    return min(after or found)[1] if found else None


class OraclePolicy(Policy):
    """The ceiling: reads the gold object from the environment (hidden state); asks the records tool for a field
    whose gold value is not offered yet, sets every field to its gold value, then submits."""

    name = "oracle"

    def act(self, observation, env):
        gold = env.gold
        for field, value in gold.items():
            lookup = by_key(observation, ("lookup", field))
            if lookup is not None and not any(identical(value, v) for v in offered(observation, field)):
                return format_action(lookup.id)
        return fill_then_submit(observation, gold, overwrite=True)


# ---- trivial policies ----------------------------------------------------------------------------------------------
class EmptyObject(Policy):
    """Submits the empty object at once."""

    name = "empty_object"

    def act(self, observation, env):
        return submit(observation)


def schema_default(prop: dict[str, Any], values: list[Any]) -> Any:
    """A field's default if offered, else its first enum value, else false, else the smallest offered number,
    else the first offered string (sorted)."""
    if not values:
        return None
    if any(identical(prop.get("default"), v) for v in values):
        return prop["default"]
    for choice in (*prop.get("enum", ()), False):
        if any(identical(choice, v) for v in values):
            return choice
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return min(numbers) if numbers else sorted(values, key=_sort_key)[0]


class SchemaDefaults(Policy):
    """Every field its schema default (first enum value, false, smallest number offered), then submit."""

    name = "schema_defaults"

    def act(self, observation, env):
        props = observation.schema["properties"]
        return fill_then_submit(observation, {f: schema_default(p, offered(observation, f)) for f, p in props.items()})


def first_value(values: list[Any], text: str) -> Any:
    """The offered value whose exact text occurs first in the record; booleans: whether the first yes/no is
    yes; else the first offered value (sorted)."""
    if not values:
        return None
    if all(isinstance(v, bool) for v in values):
        answer = re.search(r"\b(yes|no)\b", text, re.IGNORECASE)
        return bool(answer) and answer.group(1).lower() == "yes"
    found = [(position, v) for v in values for position in occurrences(v, text, case_sensitive=True)]
    return min(found, key=lambda f: f[0])[1] if found else sorted(values, key=_sort_key)[0]


class CopyFirstValue(Policy):
    """Every field gets the record's first value of the field's JSON type (ignoring enums and patterns), then
    submit."""

    name = "copy_first_value"

    def act(self, observation, env):
        props = observation.schema["properties"]
        return fill_then_submit(
            observation, {f: first_value(offered(observation, f), observation.prompt) for f in props}
        )


# The environment's own policies (EnvSpec adds the generic ones: random, first_candidate, repeat_last).
POLICIES = (HeuristicExtractor, OraclePolicy, EvidenceExpert, EmptyObject, SchemaDefaults, CopyFirstValue)
TRIVIAL = ("empty_object", "schema_defaults", "copy_first_value")
# Each reported policy's role (EnvSpec.roles), in report order (EnvSpec adds random first, the generic trivial last).
ROLES = {"heuristic": "teacher", "oracle": "oracle", "evidence_expert": "baseline"} | dict.fromkeys(TRIVIAL, "trivial")
