"""Seeded json_tasks tasks: five schema families, three for `train` and `holdout`, two only for `holdout_novel`.

Used by `JsonTasksEnv.reset` (through `generate`). Each family writes one record or request and the schema of a
subset of its fields; every field is written in an easy way (its label and its value, as the schema names them)
or, with probability `HARD`, in one of the ways a keyword extractor gets wrong: a synonym, a number that needs
arithmetic or comes after another number, a negation, a date in another format, a second value of the same type
nearer the label. One field of most tasks is not in the text at all and only the records tool (`lookup`) gives
it. The families are tables (families.py) that one generator runs (`generate`, with the rows of drafting.py);
DATA.md lists every variant; every number of the generator lives in these three modules, once.
"""

from __future__ import annotations

import random

from .drafting import FIRST, HARD, LAST, MONTHS, Draft, value
from .families import (
    AIRPORTS,
    COMPANIES,
    FAMILIES,
    HOTEL_CITIES,
    NOVEL_FAMILIES,
    PLACE_NOTES,
    PRODUCTS,
    STREETS,
    TITLES,
    TOWNS,
    TRAIN_FAMILIES,
)
from .task import Task, dedupe

LOOKUP_SHARE = 0.7  # chance that a task's schema includes its family's looked-up field
EXTRA_SHARE = 0.7  # chance that one of the family's off-schema fields is offered as a distractor
MIN_FIELDS = 5  # a schema has between MIN_FIELDS and all of its family's fields

__all__ = ["AIRPORTS", "HARD", "MONTHS", "NOVEL_FAMILIES", "TRAIN_FAMILIES", "generate", "vocabulary_text"]


def generate(internal_seed: int, novel: bool, hard: float = HARD) -> Task:
    """The task of one internal seed (see `split_seed`): a family of the split, then its text and schema (each
    field written in a hard way with probability `hard`)."""
    rng = random.Random(internal_seed)
    family = FAMILIES[rng.choice(NOVEL_FAMILIES if novel else TRAIN_FAMILIES)]
    d = Draft(rng, hard)
    for row in family.rows:
        row(d)
    d.extras = [(name, value(template, d.values)) for name, template in family.extras]
    looked_up = [name for name in d.props if name in d.lookup]
    plain = [name for name in d.props if name not in d.lookup]
    keep = set(rng.sample(plain, rng.randint(MIN_FIELDS, len(plain))))
    if rng.random() < LOOKUP_SHARE:
        keep |= set(looked_up)
    fields = [name for name in d.props if name in keep]
    body = list(d.clauses)
    rng.shuffle(body)
    prompt = "; ".join((*d.opening, *body, *d.closing)) + "."
    schema = {
        "title": family.name,
        "type": "object",
        "properties": {name: d.props[name] for name in fields},
        "required": fields,
        "additionalProperties": False,
    }
    extras = (rng.choice(d.extras),) if rng.random() < EXTRA_SHARE else ()
    return Task(
        family=family.name,
        instruction=family.instruction,
        prompt=prompt,
        schema=schema,
        gold={name: d.gold[name] for name in fields},
        lookup={name: v for name, v in d.lookup.items() if name in keep},
        options={name: dedupe(d.options[name]) for name in fields},
        extras=extras,
    )


def vocabulary_text() -> str:
    """Every fixed word the generator can write (the tiny tokenizer's extra text)."""
    pools = (MONTHS, FIRST, LAST, TOWNS, STREETS, PRODUCTS, COMPANIES, TITLES, HOTEL_CITIES, PLACE_NOTES)
    words = [w for pool in pools for w in pool] + [*AIRPORTS, *AIRPORTS.values(), *FAMILIES]
    samples = []
    for seed in range(400):  # every family, every value, every wording: all easy, then all hard
        task = generate(seed, novel=seed % 2 == 1, hard=float(seed % 4 >= 2))
        samples += [task.instruction, task.prompt, repr(task.schema), repr(task.extras), repr(task.options)]
    return " ".join(words) + "\n" + "\n".join(samples)
