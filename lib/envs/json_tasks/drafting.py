"""How a built-in json_tasks task is written: the `Draft` a family's rows fill in, and the kinds of row a family's
table (families.py) is made of. `scenario.generate` runs a family's rows in order on one `random.Random`.

A row draws values into the task's namespace (`Draft.values`, by name), writes phrases into the text (its opening,
its middle clauses, which are shuffled, or its closing) and adds a field: its schema, its gold value and the
values offered for it. A `Field` is written in one of two `Way`s, the hard one with probability `Draft.hard_share`:
phrases are `str.format` templates over the namespace (`{n:count adult}` writes "2 adults", `{n:ordinal}` "3rd"),
and an offered value that is one bare name (`{kg}`, `{others[0]}`) is that value as drawn, a number staying a number
(`{number!s}` is its text). Draws happen in the order the rows name them, which is the order the generator has
always drawn in: a task's text is a pure function of its seed.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

HARD = 0.25  # chance that a field is written in one of its hard ways
COPY_SHARE = 0.7  # chance that a string field is offered a value copying the schema's text

DATE_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
FIRST = ("Dana", "Ana", "Omar", "Lena", "Ravi", "Mei", "Jonas", "Priya", "Tomas", "Aisha", "Ken", "Sofia", "Yusuf")
LAST = ("Kim", "Ruiz", "Haddad", "Novak", "Patel", "Chen", "Berg", "Rao", "Silva", "Okafor", "Ito", "Costa", "Meyer")


@dataclass
class Draft:
    """A task being written: the opening of the text, its clauses (shuffled behind the opening), each field's
    schema, gold value and offered values, the looked-up values, the off-schema distractor fields, and the values
    drawn so far by name."""

    rng: random.Random
    hard_share: float = HARD
    opening: list[str] = field(default_factory=list)
    clauses: list[str] = field(default_factory=list)
    closing: list[str] = field(default_factory=list)
    props: dict[str, dict] = field(default_factory=dict)
    gold: dict[str, Any] = field(default_factory=dict)
    options: dict[str, list] = field(default_factory=dict)
    lookup: dict[str, Any] = field(default_factory=dict)
    extras: list[tuple[str, Any]] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)

    def hard(self) -> bool:
        return self.rng.random() < self.hard_share

    def add(self, name: str, prop: dict, gold: Any, *distractors: Any, lookup: bool = False, only=False) -> None:
        """A field: an enum offers all its values, then the distractors; `only`: exactly gold and distractors."""
        self.props[name], self.gold[name] = prop, gold
        values = [gold, *distractors] if only or "enum" not in prop else [*prop["enum"], *distractors]
        self.options[name] = [v for v in values if v is not None]
        if lookup:
            self.lookup[name] = gold

    def draw(self, draws: Mapping[str, Drawer]) -> None:
        """Draw each value in turn; a name of several words ("town warehouse") takes a draw of as many values."""
        for names, drawer in draws.items():
            drawn = drawer(self, self.values)
            self.values.update(zip(names.split(), drawn) if " " in names else {names: drawn})

    def write(self, phrases: tuple[str, ...]) -> None:
        """Each phrase, filled in from the values drawn, at the end of its part of the text: the opening for a
        phrase marked `^`, the closing for one marked `$`, else the middle clauses."""
        for phrase in phrases:
            marker = phrase[0] if phrase[0] in "^$" else ""
            part = {"^": self.opening, "$": self.closing}.get(marker, self.clauses)
            part.append(text(phrase[len(marker) :], self.values))


Drawer = Callable[[Draft, dict], Any]  # (the draft, the values drawn so far) -> a value (its rng: draft.rng)


# ---- words and values ---------------------------------------------------------------------------------------------
def _date(rng: random.Random, start: date = date(2025, 1, 6), days: int = 330) -> date:
    return start + timedelta(days=rng.randrange(days))


def _iso(d: date) -> str:
    return d.isoformat()


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _person(rng: random.Random, *avoid: str) -> str:
    while True:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name not in avoid and name.split()[0] not in {a.split()[0] for a in avoid}:
            return name


class _Words(string.Formatter):
    """`str.format` with two more format specs: `{n:count adult}` ("2 adults") and `{n:ordinal}` ("3rd")."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec.startswith("count "):
            return _count(value, format_spec.removeprefix("count "))
        if format_spec == "ordinal":
            return _ordinal(value)
        return super().format_field(value, format_spec)


_WORDS = _Words()
_BARE = re.compile(r"\{([\w\[\]]+)\}")  # one name, perhaps indexed, without conversion or format spec


def text(template: str, values: Mapping[str, Any]) -> str:
    return _WORDS.vformat(template, (), values)


def value(template: str, values: Mapping[str, Any]) -> Any:
    """An offered value: the value itself for a bare name (`{kg}`), else the filled-in text."""
    bare = _BARE.fullmatch(template)
    return _WORDS.get_field(bare.group(1), (), values)[0] if bare else text(template, values)


# ---- draws --------------------------------------------------------------------------------------------------------
def rand(low: int, high: int, times: int = 1) -> Drawer:
    return lambda d, v: d.rng.randrange(low, high) * times


def between(low: int, high: int) -> Drawer:
    return lambda d, v: d.rng.randint(low, high)


def uniform(low: float, high: float) -> Drawer:
    return lambda d, v: round(d.rng.uniform(low, high), 1)


def pick(pool) -> Drawer:
    return lambda d, v: d.rng.choice(pool)


def two(pool) -> Drawer:
    """Two different members of `pool` (for a name of two words)."""
    return lambda d, v: d.rng.sample(pool, 2)


def people(d: Draft, v: dict) -> tuple[str, str]:
    """Two people with different first names."""
    first = _person(d.rng)
    return first, _person(d.rng, first)


def calc(rule: Callable[[dict], Any]) -> Drawer:
    """A value computed from the values drawn so far (it draws nothing)."""
    return lambda d, v: rule(v)


# ---- the rows -----------------------------------------------------------------------------------------------------
class Way:
    """One way of writing a field: its phrases (`^` marks one for the text's opening, `$` one for its closing,
    the rest are middle clauses), the values it offers, gold first (None: the field's), and values drawn once this
    way is chosen, before its phrases are written."""

    def __init__(self, *phrases: str, offered: tuple[str, ...] | None = None, draw: Mapping[str, Drawer] | None = None):
        self.phrases, self.offered, self.draw = phrases, offered, draw or {}


@dataclass(frozen=True)
class Field:
    """A field: its values drawn, then (if it has a hard way) the coin, then the way's draws, phrases and offered
    values; `copy`: also offered a copy of the schema's text (COPY_SHARE); `lookup`: only the records tool knows it;
    `only`: offered exactly `offered` (an enum's other values are not)."""

    name: str
    prop: dict
    offered: tuple[str, ...] = ()
    easy: Way = Way()
    hard: Way | None = None
    draw: Mapping[str, Drawer] = field(default_factory=dict)
    copy: bool = False
    lookup: bool = False
    only: bool = False

    def __call__(self, d: Draft) -> None:
        d.draw(self.draw)
        way = self.hard if self.hard is not None and d.hard() else self.easy
        d.draw(way.draw)
        d.write(way.phrases)
        offered = [value(template, d.values) for template in (way.offered or self.offered)]
        d.add(self.name, self.prop, *offered, lookup=self.lookup, only=self.only)
        if self.copy and d.rng.random() < COPY_SHARE:
            d.options[self.name].append(self.prop["description"] if d.rng.random() < 0.6 else "string")


@dataclass(frozen=True)
class Note:
    """Values drawn and a phrase written (marked as a `Way`'s) that belong to no field; `either`: a phrase put at
    the opening or the closing, by a coin."""

    phrase: str = ""
    draw: Mapping[str, Drawer] = field(default_factory=dict)
    either: str = ""

    def __call__(self, d: Draft) -> None:
        d.draw(self.draw)
        d.write((self.phrase,) if self.phrase else ())
        if self.either:
            (d.opening if d.rng.random() < 0.5 else d.closing).append(text(self.either, d.values))


@dataclass(frozen=True)
class Date:
    """A date: easy `label: 2025-03-14`; hard, the same date in words (`hard_words March 14, 2025`), often with
    another ISO date (`other`) nearer the text's start. The other date is a distractor either way."""

    name: str
    description: str
    label: str
    hard_words: str
    other: tuple[str, str]

    def __call__(self, d: Draft) -> None:
        rng = d.rng
        gold, second = _date(rng), _date(rng)
        while second == gold:
            second = _date(rng)
        prop = {"type": "string", "pattern": DATE_PATTERN, "description": self.description}
        if d.hard():
            written = _long(gold) if rng.random() < 0.5 else _short(gold)
            d.clauses.append(f"{self.hard_words} {written}")
            if rng.random() < 0.7:
                d.opening.append(f"{self.other[0]} {_iso(second)}")
            else:
                d.closing.append(f"{self.other[1]} {_iso(second)}")
            d.add(self.name, prop, _iso(gold), written, _iso(second))
        else:
            d.clauses.append(f"{self.label}: {_iso(gold)}")
            d.closing.append(f"{self.other[1]} {_iso(second)}")
            d.add(self.name, prop, _iso(gold), _iso(second), f"{gold.month:02d}/{gold.day:02d}/{gold.year}")


def _long(d: date) -> str:
    return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"


def _short(d: date) -> str:
    return f"{d.day} {MONTHS[d.month - 1][:3]} {d.year}"


@dataclass(frozen=True)
class Boolean:
    """A boolean: easy, the `said` phrases (yes, no; or not mentioned: false); hard, the `hard` ones: the fact
    without the keyword (true) or a negation before it (false)."""

    name: str
    description: str
    said: tuple[str, str]
    hard: tuple[str, str]

    def __call__(self, d: Draft) -> None:
        truth = d.rng.random() < 0.5
        if d.hard():
            d.clauses.append(self.hard[0] if truth else self.hard[1])
        elif truth:
            d.clauses.append(self.said[0])
        elif d.rng.random() < 0.5:
            d.clauses.append(self.said[1])
        d.add(self.name, {"type": "boolean", "default": False, "description": self.description}, truth, not truth)


@dataclass(frozen=True)
class Card:
    """A card number only the records tool knows; the text shows a lapsed one (`note`), the tempting distractor,
    drawn as `old_card`."""

    name: str
    prefix: str
    digits: int
    description: str
    note: str

    def __call__(self, d: Draft) -> None:
        low, high = 10 ** (self.digits - 1), 10**self.digits
        old, current = f"{self.prefix}{d.rng.randrange(low, high)}", f"{self.prefix}{d.rng.randrange(low, high)}"
        d.closing.append(self.note.format(old))
        prop = {"type": "string", "pattern": f"^{self.prefix}[0-9]{{{self.digits}}}$", "description": self.description}
        d.add(self.name, prop, current, old, lookup=True)
        d.values["old_card"] = old


@dataclass(frozen=True)
class Family:
    """One schema family: the instruction, the rows that write a task, and its off-schema fields (name, value
    template), one of which may be offered as a distractor."""

    name: str
    instruction: str
    rows: tuple[Callable[[Draft], None], ...]
    extras: tuple[tuple[str, str], ...]


# ---- schema properties and the rows families share ----------------------------------------------------------------
def string_prop(description: str) -> dict:
    return {"type": "string", "description": description}


def integer(description: str) -> dict:
    return {"type": "integer", "description": description}


def number(description: str) -> dict:
    return {"type": "number", "description": description}


def enum(values, default=None, description="") -> dict:
    prop = {"type": "string", "enum": list(values), "description": description}
    if default is not None:
        prop["default"] = default
    return prop


def synonyms(name: str, words: dict[str, str], default: str, description: str, easy, shown=str.capitalize) -> Field:
    """An enum field: hard, a phrase that means the value (`words[value]`); easy, the phrase `easy` (a `Way`, or
    its one clause), where `{<name>_shown}` is the value as `shown` writes it, the near-miss it offers."""
    return Field(
        name,
        enum(words, default, description),
        draw={
            name: pick(tuple(words)),
            f"{name}_shown": calc(lambda v: shown(v[name])),
            f"{name}_said": calc(lambda v: words[v[name]]),
        },
        offered=(f"{{{name}}}", f"{{{name}_shown}}"),
        hard=Way(f"{{{name}_said}}"),
        easy=easy if isinstance(easy, Way) else Way(easy),
    )


def looked_up(name: str, values: tuple[str, ...], default: str, description: str) -> Field:
    """An enum field the text never states: only the records tool gives it."""
    prop = enum(values, default, description)
    return Field(name, prop, draw={name: pick(values)}, offered=(f"{{{name}}}",), lookup=True)
