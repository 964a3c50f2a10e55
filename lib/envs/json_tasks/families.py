"""The five json_tasks schema families as tables: each family's fields in order, how each is drawn and written
(easy, and the hard way a keyword extractor gets wrong) and what it offers, and the name pools they draw from.
drafting.py says what the rows mean; DATA.md lists every wording.
"""

from __future__ import annotations

from .drafting import (
    Boolean,
    Card,
    Date,
    Family,
    Field,
    Note,
    Way,
    between,
    calc,
    enum,
    integer,
    looked_up,
    number,
    people,
    pick,
    rand,
    string_prop,
    synonyms,
    two,
    uniform,
)

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
CODES = tuple(AIRPORTS)
COMPANIES = ("Northwind", "Contoso", "Fabrikam", "Tailspin", "Litware", "Adatum", "Proseware", "Woodgrove")
TITLES = ("Data Analyst", "Product Designer", "Backend Engineer", "Support Lead", "Account Manager", "QA Engineer")
HOTEL_CITIES = ("Lisbon", "Porto", "Madrid", "Vienna", "Prague", "Krakow", "Lyon", "Turin")
PLACE_NOTES = ("near the station", "close to the old town", "by the river", "near the venue")

# each enum value and the phrase that says it without naming it
SPEEDS = {"standard": "regular post", "express": "overnight delivery", "economy": "slowest cheapest post"}
TRIAGE = {"routine": "non-urgent follow-up", "urgent": "needs to be seen ASAP", "emergency": "critical, resus bay"}
CABINS = {
    "economy": "coach seats",
    "premium": "extra legroom seats",
    "business": "lie-flat seats",
    "first": "the best cabin there is",
}
LEVELS = {"junior": "entry-level", "mid": "a few years in", "senior": "8+ years, leads the team"}
ROOMS = {"single": "one bed just for me", "double": "a king bed", "suite": "separate living area"}


def plus(name: str, n: int):
    return calc(lambda v: v[name] + n)


def total(a: str, b: str):
    return calc(lambda v: v[a] + v[b])


def _city_or_code(name: str):
    """The airport `name`, by its city in the hard way, else by its code (each airport its own coin)."""
    return lambda d, v: AIRPORTS[v[name]] if d.hard() else v[name]


def _other_codes(d, v) -> list[str]:
    others = [c for c in CODES if c not in (v["origin"], v["destination"])]
    d.rng.shuffle(others)
    return others


# The tables, laid out by hand (one row a field or a note, its ways aligned): ruff's formatter leaves them as they are.
# fmt: off
SHIPPING_ORDER = Family("shipping_order", "Extract the order record into an object of the schema.", (
    Field("order_id", {"type": "string", "pattern": "^ORD-[0-9]{5}$", "description": "order code"},
          draw={"number": rand(10000, 100000), "old": rand(10000, 100000)},
          hard=Way("^Order no. {number}", "^replaces cancelled order ORD-{old}",
                   offered=("ORD-{number}", "{number!s}", "ORD-{old}")),
          easy=Way("^Order ORD-{number}", "$replaces cancelled order ORD-{old}",
                   offered=("ORD-{number}", "ORD-{old}", "ord-{number}"))),
    Field("recipient", string_prop("person receiving"), ("{recipient}", "{buyer}", "{first_name}"), copy=True,
          draw={"recipient buyer": people, "first_name": calc(lambda v: v["recipient"].split()[0])},
          hard=Way("^placed by {buyer}", "deliver to {recipient}"),
          easy=Way("recipient: {recipient}", "$placed by {buyer}")),
    Field("city", string_prop("destination town"), ("{town}", "{warehouse}", "{house} {street}"), copy=True,
          draw={"town warehouse": two(TOWNS), "house": rand(2, 99), "street": pick(STREETS)},
          hard=Way("^from the {warehouse} warehouse", "to {house} {street}, {town}"),
          easy=Way("city: {town}, {house} {street}", "$from the {warehouse} warehouse")),
    Field("quantity", integer("items ordered"),
          draw={"product": pick(PRODUCTS), "packs": between(2, 4), "per": pick((4, 6, 8))},
          hard=Way("quantity: {packs} packs of {per} {product}", offered=("{items}", "{packs}", "{per}"),
                   draw={"items": calc(lambda v: v["packs"] * v["per"])}),
          easy=Way("quantity: {items} {product}", offered=("{items}", "{more}", "{per}"),
                   draw={"items": between(2, 30), "more": total("items", "packs")})),
    Field("weight_kg", number("parcel weight kg"), ("{kg}", "{lb}", "{heavier}"),
          draw={"kg": uniform(0.6, 12.0), "lb": calc(lambda v: round(v["kg"] * 2.2046, 1)),
                "heavier": calc(lambda v: round(v["kg"] + 1.5, 1))},
          hard=Way("weight: {lb} lb ({kg} kg)"),
          easy=Way("weight: {kg} kg")),
    synonyms("shipping", SPEEDS, "standard", "delivery speed", easy="{shipping_shown} shipping"),
    Boolean("gift_wrap", "wrap as gift", ("gift wrap: yes", "gift wrap: no"),
            ("please add a ribbon and a card", "no gift wrap needed")),
    Date("ship_date", "dispatch day", "ship date", "leaves the warehouse", ("placed on", "invoice dated")),
    Note("^customer C-{customer}", {"customer": rand(1000, 10000)}),
    looked_up("customer_tier", ("bronze", "silver", "gold"), "bronze", "loyalty tier"),
), extras=(("customer_id", "C-{customer}"), ("placed_by", "{buyer}")))

PATIENT_INTAKE = Family("patient_intake", "Extract the intake note into an object of the schema.", (
    Field("patient", string_prop("full name"), ("{patient}", "{doctor}", "{surname}"), copy=True,
          draw={"patient doctor": people, "surname": calc(lambda v: v["patient"].split()[-1])},
          hard=Way("^Referred by Dr. {doctor}", "seen today: {patient}"),
          easy=Way("^Patient: {patient}", "$referred by Dr. {doctor}")),
    Note(draw={"age": between(19, 88), "systolic": between(105, 160), "diastolic": between(62, 95),
               "pulse": between(55, 110)},
         either="BP {systolic}/{diastolic}"),
    Field("age", integer("age in years"), ("{age}", "{systolic}", "{older}"), draw={"older": plus("age", 10)},
          hard=Way("{age} yo"),
          easy=Way("age: {age}")),
    Field("heart_rate", integer("pulse bpm"), ("{pulse}", "{systolic}", "{diastolic}"),
          hard=Way("HR {pulse}"),
          easy=Way("heart rate: {pulse}")),
    Field("temperature_c", number("body temperature"), ("{celsius}", "{fahrenheit}", "{cooler}"),
          draw={"celsius": uniform(36.1, 40.2), "fahrenheit": calc(lambda v: round(v["celsius"] * 9 / 5 + 32, 1)),
                "cooler": calc(lambda v: round(v["celsius"] - 1.0, 1))},
          hard=Way("temperature: {fahrenheit} F ({celsius} C)"),
          easy=Way("temperature: {celsius} C")),
    synonyms("triage", TRIAGE, "routine", "triage level", shown=str.upper,
             easy=Way("triage: {written}",
                      draw={"written": lambda d, v: v["triage_shown"] if d.rng.random() < 0.5 else v["triage"]})),
    Boolean("allergies", "known allergies", ("allergies: penicillin", "allergies: none"),
            ("allergic to penicillin", "no known allergies")),
    Date("visit_date", "date of visit", "visit date", "seen on", ("last visit", "next visit")),
    Note("^MRN-{record}", {"record": rand(100000, 1000000)}),
    looked_up("insurance", ("basic", "plus", "premium"), "basic", "insurance plan"),
), extras=(("doctor", "Dr. {doctor}"), ("mrn", "MRN-{record}")))

BOOK_FLIGHT = Family("book_flight", "Call book_flight with the arguments this request gives.", (
    Note("^Book a flight from {origin_said} to {destination_said}",
         {"origin destination": two(CODES), "origin_said": _city_or_code("origin"),
          "destination_said": _city_or_code("destination"), "others": _other_codes}),
    Field("origin", enum(CODES, description="from airport"),
          ("{origin}", "{destination}", "{others[0]}", "{others[1]}"), only=True),
    Field("destination", enum(CODES, description="to airport"),
          ("{destination}", "{origin}", "{others[1]}", "{others[2]}"), only=True),
    Date("date", "travel date", "travel date", "flying out", ("back by", "returning")),
    Field("passengers", integer("travellers"),
          hard=Way("for {adults:count adult} and {children:count kid}",
                   offered=("{passengers}", "{adults}", "{children}"),
                   draw={"adults": between(1, 3), "children": between(1, 2),
                         "passengers": total("adults", "children")}),
          easy=Way("passengers: {passengers}, {bags:count checked bag}", offered=("{passengers}", "{bags}", "{more}"),
                   draw={"passengers": between(1, 6), "bags": between(1, 3), "more": plus("passengers", 1)})),
    synonyms("cabin", CABINS, "economy", "seat class", easy="cabin: {cabin_shown}"),
    Boolean("refundable", "refundable fare", ("refundable fare please", "refundable: no"),
            ("must be able to cancel", "non-refundable is fine")),
    Card("loyalty_id", "FF", 6, "frequent flyer card", "my old card {} expired"),
), extras=(("old_card", "{old_card}"), ("home_airport", "{origin}")))

JOB_POSTING = Family("job_posting", "Extract the job posting into an object of the schema.", (
    Field("title", string_prop("job title"), ("{title}", "{manager}", "{title_word}"), copy=True,
          draw={"title manager": two(TITLES), "company parent": two(COMPANIES),
                "title_word": calc(lambda v: v["title"].split()[-1])},
          hard=Way("^reporting to the {manager}", "we are hiring a {title}"),
          easy=Way("^title: {title}", "$reporting to the {manager}")),
    Field("company", string_prop("employer"), ("{company}", "{parent}"), copy=True,
          hard=Way("^a {parent} subsidiary", "join {company}"),
          easy=Way("company: {company}", "$a {parent} subsidiary")),
    Field("salary_min", integer("lowest pay usd"),
          draw={"low": rand(50, 120, times=1000), "high": lambda d, v: v["low"] + d.rng.randrange(10, 40) * 1000,
                "low_k": calc(lambda v: v["low"] // 1000), "high_k": calc(lambda v: v["high"] // 1000)},
          hard=Way("salary: {low_k}k-{high_k}k", offered=("{low}", "{low_k}", "{high}")),
          easy=Way("salary: {low} to {high} USD", offered=("{low}", "{high}", "{low_k}"))),
    Boolean("remote", "remote allowed", ("remote: yes", "remote: no"), ("work from home is fine", "no remote work")),
    synonyms("seniority", LEVELS, "mid", "experience level", easy="level: {seniority_shown}"),
    Date("start_date", "first day", "start date", "starting", ("apply by", "posted")),
    Field("openings", integer("open positions"),
          hard=Way("hiring {engineers:count engineer} and {designers:count designer}",
                   offered=("{openings}", "{engineers}", "{designers}"),
                   draw={"engineers": between(1, 3), "designers": between(1, 2),
                         "openings": total("engineers", "designers")}),
          easy=Way("openings: {openings}", offered=("{openings}", "{more}"),
                   draw={"openings": between(1, 5), "more": plus("openings", 2)})),
    Note("^REQ-{requisition}", {"requisition": rand(1000, 10000)}),
    looked_up("department", ("engineering", "sales", "support", "finance"), "engineering", "team"),
), extras=(("requisition", "REQ-{requisition}"), ("parent_company", "{parent}")))

BOOK_HOTEL = Family("book_hotel", "Call book_hotel with the arguments this request gives.", (
    Field("city", string_prop("hotel city"), ("{city}", "{home}"), copy=True, draw={"city home": two(HOTEL_CITIES)},
          hard=Way("^Flying in from {home}, need a room {place} in {city}", draw={"place": pick(PLACE_NOTES)}),
          easy=Way("^Hotel in {city}, {place}", "$flying in from {home}", draw={"place": pick(PLACE_NOTES)})),
    Date("check_in", "arrival day", "check in", "arriving", ("flight booked", "checking out")),
    Field("nights", integer("length of stay"),
          hard=Way("from the {first:ordinal} to the {last:ordinal}", offered=("{nights}", "{first}", "{last}"),
                   draw={"first": between(2, 20), "nights": between(2, 6), "last": total("first", "nights")}),
          easy=Way("{nights:count night}", offered=("{nights}", "{more}"),
                   draw={"nights": between(1, 9), "more": plus("nights", 1)})),
    Field("guests", integer("people staying"),
          hard=Way("{adults:count adult} plus {kids:count kid}", offered=("{guests}", "{adults}", "{kids}"),
                   draw={"adults": between(1, 2), "kids": between(1, 3), "guests": total("adults", "kids")}),
          easy=Way("guests: {guests}", offered=("{guests}", "{more}"),
                   draw={"guests": between(1, 4), "more": plus("guests", 1)})),
    synonyms("room", ROOMS, "double", "room type", easy="room: {room_shown}"),
    Boolean("breakfast", "breakfast included", ("breakfast: yes", "breakfast: no"),
            ("morning meal please", "no breakfast needed")),
    Card("member_id", "HM", 5, "member card", "old member card {} lapsed"),
), extras=(("home_city", "{home}"), ("old_card", "{old_card}")))
# fmt: on

FAMILIES = {f.name: f for f in (SHIPPING_ORDER, PATIENT_INTAKE, BOOK_FLIGHT, JOB_POSTING, BOOK_HOTEL)}
TRAIN_FAMILIES = ("shipping_order", "patient_intake", "book_flight")
NOVEL_FAMILIES = ("job_posting", "book_hotel")
