"""Seeded json_tasks tasks: five schema families, three for `train` and `holdout`, two only for `holdout_novel`.

Used by `JsonTasksEnv.reset` (through `generate`). Each family writes one record or request and the schema of a
subset of its fields; every field is written in an easy way (its label and its value, as the schema names them)
or, with probability `HARD`, in one of the ways a keyword extractor gets wrong: a synonym, a number that needs
arithmetic or comes after another number, a negation, a date in another format, a second value of the same type
nearer the label. One field of most tasks is not in the text at all and only the records tool (`lookup`) gives
it. DATA.md lists every variant; every number of the generator lives here, once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from .task import Task, dedupe

HARD = 0.25  # chance that a field is written in one of its hard ways
LOOKUP_SHARE = 0.7  # chance that a task's schema includes its family's looked-up field
EXTRA_SHARE = 0.7  # chance that one of the family's off-schema fields is offered as a distractor
COPY_SHARE = 0.7  # chance that a string field is offered a value copying the schema's text
MIN_FIELDS = 5  # a schema has between MIN_FIELDS and all of its family's fields

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
TOWNS = ("Springfield", "Riverton", "Lakewood", "Fairview", "Georgetown", "Ashland", "Milford", "Clayton", "Dover")
STREETS = ("Elm St", "Oak Ave", "Mill Rd", "Pine St", "Lake Dr", "Hill Rd", "Bay St", "Park Ave")
PRODUCTS = ("mugs", "lamps", "plates", "candles", "notebooks", "towels", "bowls", "pens")
AIRPORTS = {
    "BOS": "Boston",
    "JFK": "New York",
    "ORD": "Chicago",
    "DEN": "Denver",
    "SFO": "San Francisco",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
}
COMPANIES = ("Northwind", "Contoso", "Fabrikam", "Tailspin", "Litware", "Adatum", "Proseware", "Woodgrove")
TITLES = ("Data Analyst", "Product Designer", "Backend Engineer", "Support Lead", "Account Manager", "QA Engineer")
HOTEL_CITIES = ("Lisbon", "Porto", "Madrid", "Vienna", "Prague", "Krakow", "Lyon", "Turin")
PLACE_NOTES = ("near the station", "close to the old town", "by the river", "near the venue")

TRAIN_FAMILIES = ("shipping_order", "patient_intake", "book_flight")
NOVEL_FAMILIES = ("job_posting", "book_hotel")
FAMILIES = (*TRAIN_FAMILIES, *NOVEL_FAMILIES)


@dataclass
class Draft:
    """A task being written: the opening of the text, its clauses (shuffled behind the opening), each field's
    schema, gold value and offered values, the looked-up values and the off-schema distractor fields."""

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

    def hard(self) -> bool:
        return self.rng.random() < self.hard_share

    def add(self, name: str, prop: dict, gold: Any, *distractors: Any, lookup: bool = False) -> None:
        self.props[name], self.gold[name] = prop, gold
        values = [gold, *distractors] if "enum" not in prop else [*prop["enum"], *distractors]
        self.options[name] = [v for v in values if v is not None]
        if lookup:
            self.lookup[name] = gold


def _date(rng: random.Random, start: date = date(2025, 1, 6), days: int = 330) -> date:
    return start + timedelta(days=rng.randrange(days))


def _iso(d: date) -> str:
    return d.isoformat()


def _long(d: date) -> str:
    return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"


def _short(d: date) -> str:
    return f"{d.day} {MONTHS[d.month - 1][:3]} {d.year}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _person(rng: random.Random, *avoid: str) -> str:
    while True:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name not in avoid and name.split()[0] not in {a.split()[0] for a in avoid}:
            return name


def _other(rng: random.Random, pool, *avoid):
    return rng.choice([p for p in pool if p not in avoid])


def _copy_distractor(d: Draft, name: str) -> None:
    """Offer a value that copies the schema's own text: the field's description or its type name."""
    if d.rng.random() < COPY_SHARE:
        d.options[name].append(d.props[name]["description"] if d.rng.random() < 0.6 else "string")


def _enum(values, default=None, description="") -> dict:
    prop = {"type": "string", "enum": list(values), "description": description}
    if default is not None:
        prop["default"] = default
    return prop


def _date_field(d: Draft, name: str, description: str, label: str, hard_words: str, other: tuple[str, str]) -> None:
    """A date: easy `label: 2025-03-14`; hard, the same date in words (`hard_words March 14, 2025`), often with
    another ISO date (`other`) nearer the text's start. The other date is a distractor either way."""
    rng = d.rng
    gold, second = _date(rng), _date(rng)
    while second == gold:
        second = _date(rng)
    prop = {"type": "string", "pattern": DATE_PATTERN, "description": description}
    if d.hard():
        written = _long(gold) if rng.random() < 0.5 else _short(gold)
        d.clauses.append(f"{hard_words} {written}")
        if rng.random() < 0.7:
            d.opening.append(f"{other[0]} {_iso(second)}")
        else:
            d.closing.append(f"{other[1]} {_iso(second)}")
        d.add(name, prop, _iso(gold), written, _iso(second))
    else:
        d.clauses.append(f"{label}: {_iso(gold)}")
        d.closing.append(f"{other[1]} {_iso(second)}")
        d.add(name, prop, _iso(gold), _iso(second), f"{gold.month:02d}/{gold.day:02d}/{gold.year}")


def _boolean(d: Draft, name: str, description: str, yes: str, no: str, hard_yes: str, hard_no: str) -> None:
    """A boolean: easy `yes` / `no` phrases (or not mentioned: false); hard, a negation before the keyword
    (`hard_no`, false) or the fact without the keyword (`hard_yes`, true)."""
    rng = d.rng
    value = rng.random() < 0.5
    if d.hard():
        d.clauses.append(hard_yes if value else hard_no)
    elif value:
        d.clauses.append(yes)
    elif rng.random() < 0.5:
        d.clauses.append(no)
    d.add(name, {"type": "boolean", "default": False, "description": description}, value, not value)


# ---- the families ---------------------------------------------------------------------------------------------------
def _lapsed_card(d: Draft, rng: random.Random, name: str, prefix: str, digits: int, description: str, note: str):
    """A card number only the records tool knows; the text shows a lapsed one (`note`), the tempting distractor.
    Returns the lapsed number."""
    old = f"{prefix}{rng.randrange(10 ** (digits - 1), 10**digits)}"
    current = f"{prefix}{rng.randrange(10 ** (digits - 1), 10**digits)}"
    d.closing.append(note.format(old))
    pattern = f"^{prefix}[0-9]{{{digits}}}$"
    d.add(name, {"type": "string", "pattern": pattern, "description": description}, current, old, lookup=True)
    return old


def shipping_order(d: Draft) -> str:
    rng = d.rng
    number, old = rng.randrange(10000, 100000), rng.randrange(10000, 100000)
    order_id = f"ORD-{number}"
    if d.hard():
        d.opening.append(f"Order no. {number}")
        d.opening.append(f"replaces cancelled order ORD-{old}")
        d.add(
            "order_id",
            {"type": "string", "pattern": "^ORD-[0-9]{5}$", "description": "order code"},
            order_id,
            str(number),
            f"ORD-{old}",
        )
    else:
        d.opening.append(f"Order {order_id}")
        d.add(
            "order_id",
            {"type": "string", "pattern": "^ORD-[0-9]{5}$", "description": "order code"},
            order_id,
            f"ORD-{old}",
            f"ord-{number}",
        )
        d.closing.append(f"replaces cancelled order ORD-{old}")

    recipient = _person(rng)
    buyer = _person(rng, recipient)
    if d.hard():
        d.opening.append(f"placed by {buyer}")
        d.clauses.append(f"deliver to {recipient}")
    else:
        d.clauses.append(f"recipient: {recipient}")
        d.closing.append(f"placed by {buyer}")
    d.add("recipient", {"type": "string", "description": "person receiving"}, recipient, buyer, recipient.split()[0])
    _copy_distractor(d, "recipient")

    town, warehouse = rng.sample(TOWNS, 2)
    street = f"{rng.randrange(2, 99)} {rng.choice(STREETS)}"
    if d.hard():
        d.opening.append(f"from the {warehouse} warehouse")
        d.clauses.append(f"to {street}, {town}")
    else:
        d.clauses.append(f"city: {town}, {street}")
        d.closing.append(f"from the {warehouse} warehouse")
    d.add("city", {"type": "string", "description": "destination town"}, town, warehouse, street)
    _copy_distractor(d, "city")

    product = rng.choice(PRODUCTS)
    packs, per = rng.randint(2, 4), rng.choice((4, 6, 8))
    if d.hard():
        quantity = packs * per
        d.clauses.append(f"quantity: {packs} packs of {per} {product}")
        d.add("quantity", {"type": "integer", "description": "items ordered"}, quantity, packs, per)
    else:
        quantity = rng.randint(2, 30)
        d.clauses.append(f"quantity: {quantity} {product}")
        d.add("quantity", {"type": "integer", "description": "items ordered"}, quantity, quantity + packs, per)

    kg = round(rng.uniform(0.6, 12.0), 1)
    lb = round(kg * 2.2046, 1)
    if d.hard():
        d.clauses.append(f"weight: {lb} lb ({kg} kg)")
    else:
        d.clauses.append(f"weight: {kg} kg")
    d.add("weight_kg", {"type": "number", "description": "parcel weight kg"}, kg, lb, round(kg + 1.5, 1))

    speeds = {"standard": "regular post", "express": "overnight delivery", "economy": "slowest cheapest post"}
    speed = rng.choice(tuple(speeds))
    written = speed.capitalize()
    if d.hard():
        d.clauses.append(speeds[speed])
        d.add("shipping", _enum(speeds, "standard", "delivery speed"), speed, written)
    else:
        d.clauses.append(f"{written} shipping")
        d.add("shipping", _enum(speeds, "standard", "delivery speed"), speed, written)

    _boolean(
        d,
        "gift_wrap",
        "wrap as gift",
        "gift wrap: yes",
        "gift wrap: no",
        "please add a ribbon and a card",
        "no gift wrap needed",
    )
    _date_field(d, "ship_date", "dispatch day", "ship date", "leaves the warehouse", ("placed on", "invoice dated"))

    customer = f"C-{rng.randrange(1000, 10000)}"
    d.opening.append(f"customer {customer}")
    tier = rng.choice(("bronze", "silver", "gold"))
    d.add("customer_tier", _enum(("bronze", "silver", "gold"), "bronze", "loyalty tier"), tier, lookup=True)
    d.extras += [("customer_id", customer), ("placed_by", buyer)]
    return "Extract the order record into an object of the schema."


def patient_intake(d: Draft) -> str:
    rng = d.rng
    patient = _person(rng)
    doctor = _person(rng, patient)
    if d.hard():
        d.opening.append(f"Referred by Dr. {doctor}")
        d.clauses.append(f"seen today: {patient}")
    else:
        d.opening.append(f"Patient: {patient}")
        d.closing.append(f"referred by Dr. {doctor}")
    d.add("patient", {"type": "string", "description": "full name"}, patient, doctor, patient.split()[-1])
    _copy_distractor(d, "patient")

    age, systolic, diastolic, pulse = (
        rng.randint(19, 88),
        rng.randint(105, 160),
        rng.randint(62, 95),
        rng.randint(55, 110),
    )
    (d.opening if rng.random() < 0.5 else d.closing).append(f"BP {systolic}/{diastolic}")
    d.clauses.append(f"{age} yo" if d.hard() else f"age: {age}")
    d.add("age", {"type": "integer", "description": "age in years"}, age, systolic, age + 10)

    if d.hard():
        d.clauses.append(f"HR {pulse}")
    else:
        d.clauses.append(f"heart rate: {pulse}")
    d.add("heart_rate", {"type": "integer", "description": "pulse bpm"}, pulse, systolic, diastolic)

    celsius = round(rng.uniform(36.1, 40.2), 1)
    fahrenheit = round(celsius * 9 / 5 + 32, 1)
    if d.hard():
        d.clauses.append(f"temperature: {fahrenheit} F ({celsius} C)")
    else:
        d.clauses.append(f"temperature: {celsius} C")
    d.add(
        "temperature_c",
        {"type": "number", "description": "body temperature"},
        celsius,
        fahrenheit,
        round(celsius - 1.0, 1),
    )

    levels = ("routine", "urgent", "emergency")
    synonyms = {
        "routine": "non-urgent follow-up",
        "urgent": "needs to be seen ASAP",
        "emergency": "critical, resus bay",
    }
    level = rng.choice(levels)
    if d.hard():
        d.clauses.append(synonyms[level])
    else:
        d.clauses.append(f"triage: {level.upper() if rng.random() < 0.5 else level}")
    d.add("triage", _enum(levels, "routine", "triage level"), level, level.upper())

    _boolean(
        d,
        "allergies",
        "known allergies",
        "allergies: penicillin",
        "allergies: none",
        "allergic to penicillin",
        "no known allergies",
    )
    _date_field(d, "visit_date", "date of visit", "visit date", "seen on", ("last visit", "next visit"))

    record = f"MRN-{rng.randrange(100000, 1000000)}"
    d.opening.append(record)
    plan = rng.choice(("basic", "plus", "premium"))
    d.add("insurance", _enum(("basic", "plus", "premium"), "basic", "insurance plan"), plan, lookup=True)
    d.extras += [("doctor", f"Dr. {doctor}"), ("mrn", record)]
    return "Extract the intake note into an object of the schema."


def book_flight(d: Draft) -> str:
    rng = d.rng
    origin, destination = rng.sample(tuple(AIRPORTS), 2)
    codes = tuple(AIRPORTS)
    origin_text = AIRPORTS[origin] if d.hard() else origin
    destination_text = AIRPORTS[destination] if d.hard() else destination
    d.opening.append(f"Book a flight from {origin_text} to {destination_text}")
    others = [c for c in codes if c not in (origin, destination)]
    rng.shuffle(others)
    d.add("origin", {"type": "string", "enum": list(codes), "description": "from airport"}, origin)
    d.options["origin"] = [origin, destination, *others[:2]]
    d.add("destination", {"type": "string", "enum": list(codes), "description": "to airport"}, destination)
    d.options["destination"] = [destination, origin, *others[1:3]]

    _date_field(d, "date", "travel date", "travel date", "flying out", ("back by", "returning"))

    if d.hard():
        adults, children = rng.randint(1, 3), rng.randint(1, 2)
        passengers = adults + children
        d.clauses.append(f"for {_count(adults, 'adult')} and {_count(children, 'kid')}")
        d.add("passengers", {"type": "integer", "description": "travellers"}, passengers, adults, children)
    else:
        passengers = rng.randint(1, 6)
        bags = rng.randint(1, 3)
        d.clauses.append(f"passengers: {passengers}, {_count(bags, 'checked bag')}")
        d.add("passengers", {"type": "integer", "description": "travellers"}, passengers, bags, passengers + 1)

    cabins = ("economy", "premium", "business", "first")
    cabin = rng.choice(cabins)
    hard_cabin = {
        "economy": "coach seats",
        "premium": "extra legroom seats",
        "business": "lie-flat seats",
        "first": "the best cabin there is",
    }
    if d.hard():
        d.clauses.append(hard_cabin[cabin])
    else:
        d.clauses.append(f"cabin: {cabin.capitalize()}")
    d.add("cabin", _enum(cabins, "economy", "seat class"), cabin, cabin.capitalize())

    _boolean(
        d,
        "refundable",
        "refundable fare",
        "refundable fare please",
        "refundable: no",
        "must be able to cancel",
        "non-refundable is fine",
    )

    old = _lapsed_card(d, rng, "loyalty_id", "FF", 6, "frequent flyer card", "my old card {} expired")
    d.extras += [("old_card", old), ("home_airport", origin)]
    return "Call book_flight with the arguments this request gives."


def job_posting(d: Draft) -> str:
    rng = d.rng
    title, manager = rng.sample(TITLES, 2)
    company, parent = rng.sample(COMPANIES, 2)
    if d.hard():
        d.opening.append(f"reporting to the {manager}")
        d.clauses.append(f"we are hiring a {title}")
    else:
        d.opening.append(f"title: {title}")
        d.closing.append(f"reporting to the {manager}")
    d.add("title", {"type": "string", "description": "job title"}, title, manager, title.split()[-1])
    _copy_distractor(d, "title")
    if d.hard():
        d.opening.append(f"a {parent} subsidiary")
        d.clauses.append(f"join {company}")
    else:
        d.clauses.append(f"company: {company}")
        d.closing.append(f"a {parent} subsidiary")
    d.add("company", {"type": "string", "description": "employer"}, company, parent)
    _copy_distractor(d, "company")

    low = rng.randrange(50, 120) * 1000
    high = low + rng.randrange(10, 40) * 1000
    if d.hard():
        d.clauses.append(f"salary: {low // 1000}k-{high // 1000}k")
        d.add("salary_min", {"type": "integer", "description": "lowest pay usd"}, low, low // 1000, high)
    else:
        d.clauses.append(f"salary: {low} to {high} USD")
        d.add("salary_min", {"type": "integer", "description": "lowest pay usd"}, low, high, low // 1000)

    _boolean(d, "remote", "remote allowed", "remote: yes", "remote: no", "work from home is fine", "no remote work")

    levels = ("junior", "mid", "senior")
    hard_level = {"junior": "entry-level", "mid": "a few years in", "senior": "8+ years, leads the team"}
    level = rng.choice(levels)
    if d.hard():
        d.clauses.append(hard_level[level])
    else:
        d.clauses.append(f"level: {level.capitalize()}")
    d.add("seniority", _enum(levels, "mid", "experience level"), level, level.capitalize())

    _date_field(d, "start_date", "first day", "start date", "starting", ("apply by", "posted"))

    if d.hard():
        engineers, designers = rng.randint(1, 3), rng.randint(1, 2)
        openings = engineers + designers
        d.clauses.append(f"hiring {_count(engineers, 'engineer')} and {_count(designers, 'designer')}")
        d.add("openings", {"type": "integer", "description": "open positions"}, openings, engineers, designers)
    else:
        openings = rng.randint(1, 5)
        d.clauses.append(f"openings: {openings}")
        d.add("openings", {"type": "integer", "description": "open positions"}, openings, openings + 2)

    requisition = f"REQ-{rng.randrange(1000, 10000)}"
    d.opening.append(requisition)
    departments = ("engineering", "sales", "support", "finance")
    d.add("department", _enum(departments, "engineering", "team"), rng.choice(departments), lookup=True)
    d.extras += [("requisition", requisition), ("parent_company", parent)]
    return "Extract the job posting into an object of the schema."


def book_hotel(d: Draft) -> str:
    rng = d.rng
    city, home = rng.sample(HOTEL_CITIES, 2)
    if d.hard():
        d.opening.append(f"Flying in from {home}, need a room {rng.choice(PLACE_NOTES)} in {city}")
    else:
        d.opening.append(f"Hotel in {city}, {rng.choice(PLACE_NOTES)}")
        d.closing.append(f"flying in from {home}")
    d.add("city", {"type": "string", "description": "hotel city"}, city, home)
    _copy_distractor(d, "city")

    _date_field(d, "check_in", "arrival day", "check in", "arriving", ("flight booked", "checking out"))

    if d.hard():
        first = rng.randint(2, 20)
        nights = rng.randint(2, 6)
        d.clauses.append(f"from the {_ordinal(first)} to the {_ordinal(first + nights)}")
        d.add("nights", {"type": "integer", "description": "length of stay"}, nights, first, first + nights)
    else:
        nights = rng.randint(1, 9)
        d.clauses.append(_count(nights, "night"))
        d.add("nights", {"type": "integer", "description": "length of stay"}, nights, nights + 1)

    if d.hard():
        adults, kids = rng.randint(1, 2), rng.randint(1, 3)
        guests = adults + kids
        d.clauses.append(f"{_count(adults, 'adult')} plus {_count(kids, 'kid')}")
        d.add("guests", {"type": "integer", "description": "people staying"}, guests, adults, kids)
    else:
        guests = rng.randint(1, 4)
        d.clauses.append(f"guests: {guests}")
        d.add("guests", {"type": "integer", "description": "people staying"}, guests, guests + 1)

    rooms = ("single", "double", "suite")
    hard_room = {"single": "one bed just for me", "double": "a king bed", "suite": "separate living area"}
    room = rng.choice(rooms)
    if d.hard():
        d.clauses.append(hard_room[room])
    else:
        d.clauses.append(f"room: {room.capitalize()}")
    d.add("room", _enum(rooms, "double", "room type"), room, room.capitalize())

    _boolean(
        d,
        "breakfast",
        "breakfast included",
        "breakfast: yes",
        "breakfast: no",
        "morning meal please",
        "no breakfast needed",
    )

    old = _lapsed_card(d, rng, "member_id", "HM", 5, "member card", "old member card {} lapsed")
    d.extras += [("home_city", home), ("old_card", old)]
    return "Call book_hotel with the arguments this request gives."


WRITERS = {f.__name__: f for f in (shipping_order, patient_intake, book_flight, job_posting, book_hotel)}


def generate(internal_seed: int, novel: bool, hard: float = HARD) -> Task:
    """The task of one internal seed (see `split_seed`): a family of the split, then its text and schema (each
    field written in a hard way with probability `hard`)."""
    rng = random.Random(internal_seed)
    family = rng.choice(NOVEL_FAMILIES if novel else TRAIN_FAMILIES)
    d = Draft(rng, hard)
    instruction = WRITERS[family](d)
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
        "title": family,
        "type": "object",
        "properties": {name: d.props[name] for name in fields},
        "required": fields,
        "additionalProperties": False,
    }
    extras = (rng.choice(d.extras),) if rng.random() < EXTRA_SHARE else ()
    return Task(
        family=family,
        instruction=instruction,
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
