"""Load and validate PolyGuard's CSV knowledge base (lib/envs/polyguard/data/, sources in DATA.md).

Used by the PolyGuard environment; `load_kb(path)` validates every row and names the file, line and
field of the first problem it finds.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SEVERITIES = ("minor", "moderate", "major", "contraindicated")
MAJOR_SEVERITIES = frozenset({"major", "contraindicated"})
HEADERS = {
    "conditions.csv": ["condition", "description", "kind"],
    "drugs.csv": ["drug", "drug_class", "indication"],
    "interactions.csv": ["drug_a", "drug_b", "severity", "mechanism", "management", "reserved"],
    "renal_rules.csv": ["drug", "egfr_below", "action", "note"],
    "contraindications.csv": ["drug", "condition", "reason"],
    "alternatives.csv": ["drug", "alternative", "note"],
}


class KnowledgeBaseError(ValueError):
    """A knowledge-base file is malformed; the message names the file, line and field."""


@dataclass(frozen=True)
class Drug:
    name: str
    drug_class: str
    indication: str


@dataclass(frozen=True)
class Interaction:
    drug_a: str
    drug_b: str
    severity: str
    mechanism: str
    management: str
    reserved: bool

    @property
    def is_major(self) -> bool:
        return self.severity in MAJOR_SEVERITIES


@dataclass(frozen=True)
class RenalRule:
    drug: str
    egfr_below: int
    action: str  # "reduce" or "avoid"
    note: str


@dataclass(frozen=True)
class KnowledgeBase:
    conditions: dict[str, str]  # condition -> kind ("treated" | "history")
    drugs: dict[str, Drug]
    interactions: dict[frozenset, Interaction]
    renal: dict[str, RenalRule]
    contraindications: dict[str, dict[str, str]]  # drug -> condition -> reason
    alternatives: dict[str, tuple[str, ...]]
    drugs_by_indication: dict[str, tuple[str, ...]]

    def interaction(self, a: str, b: str) -> Interaction | None:
        return self.interactions.get(frozenset((a, b)))


def _rows(directory: Path, name: str):
    path = directory / name
    if not path.exists():
        raise KnowledgeBaseError(f"{path}: file is missing")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header != HEADERS[name]:
            raise KnowledgeBaseError(f"{path}: header {header} != expected {HEADERS[name]}")
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise KnowledgeBaseError(f"{name} line {line}: expected {len(header)} fields, got {len(row)}")
            record = {k: v.strip() for k, v in zip(header, row)}
            for key, value in record.items():
                if not value:
                    raise KnowledgeBaseError(f"{name} line {line}: field {key!r} is empty")
            yield line, record


def _require(ok: bool, name: str, line: int, message: str) -> None:
    if not ok:
        raise KnowledgeBaseError(f"{name} line {line}: {message}")


def load_kb(directory: Path | str = DATA_DIR) -> KnowledgeBase:
    """Read and validate the six CSV files. Raises KnowledgeBaseError naming the offending row."""
    directory = Path(directory)
    conditions = _conditions(directory)
    drugs = _drugs(directory, conditions)
    interactions = _interactions(directory, drugs)
    renal = _renal(directory, drugs)
    contraindications = _contraindications(directory, drugs, conditions)
    alternatives = _alternatives(directory, drugs)
    by_indication: dict[str, list[str]] = {}
    for drug in drugs.values():
        by_indication.setdefault(drug.indication, []).append(drug.name)
    return KnowledgeBase(
        conditions=conditions,
        drugs=drugs,
        interactions=interactions,
        renal=renal,
        contraindications=contraindications,
        alternatives={k: tuple(v) for k, v in alternatives.items()},
        drugs_by_indication={k: tuple(v) for k, v in by_indication.items()},
    )


def _conditions(directory: Path) -> dict[str, str]:
    conditions: dict[str, str] = {}
    for line, r in _rows(directory, "conditions.csv"):
        _require(r["kind"] in ("treated", "history"), "conditions.csv", line, f"kind {r['kind']!r} not treated/history")
        _require(r["condition"] not in conditions, "conditions.csv", line, f"duplicate condition {r['condition']!r}")
        conditions[r["condition"]] = r["kind"]
    return conditions


def _drugs(directory: Path, conditions: dict[str, str]) -> dict[str, Drug]:
    drugs: dict[str, Drug] = {}
    for line, r in _rows(directory, "drugs.csv"):
        _require(r["drug"] not in drugs, "drugs.csv", line, f"duplicate drug {r['drug']!r}")
        _require(
            conditions.get(r["indication"]) == "treated",
            "drugs.csv",
            line,
            f"indication {r['indication']!r} is not a treated condition in conditions.csv",
        )
        drugs[r["drug"]] = Drug(r["drug"], r["drug_class"], r["indication"])
    return drugs


def _known(drugs: dict[str, Drug], name: str, line: int, drug: str, field: str) -> None:
    _require(drug in drugs, name, line, f"{field} {drug!r} is not in drugs.csv")


def _interactions(directory: Path, drugs: dict[str, Drug]) -> dict[frozenset, Interaction]:
    interactions: dict[frozenset, Interaction] = {}
    for line, r in _rows(directory, "interactions.csv"):
        _known(drugs, "interactions.csv", line, r["drug_a"], "drug_a")
        _known(drugs, "interactions.csv", line, r["drug_b"], "drug_b")
        pair = frozenset((r["drug_a"], r["drug_b"]))
        _require(len(pair) == 2, "interactions.csv", line, "a drug cannot interact with itself")
        _require(pair not in interactions, "interactions.csv", line, f"pair {sorted(pair)} listed twice")
        _require(
            r["severity"] in SEVERITIES, "interactions.csv", line, f"severity {r['severity']!r} not in {SEVERITIES}"
        )
        _require(r["reserved"] in ("0", "1"), "interactions.csv", line, "reserved must be 0 or 1")
        reserved = r["reserved"] == "1"
        _require(
            not reserved or r["severity"] in MAJOR_SEVERITIES,
            "interactions.csv",
            line,
            "only major or contraindicated interactions can be reserved",
        )
        interactions[pair] = Interaction(
            r["drug_a"], r["drug_b"], r["severity"], r["mechanism"], r["management"], reserved
        )
    return interactions


def _renal(directory: Path, drugs: dict[str, Drug]) -> dict[str, RenalRule]:
    renal: dict[str, RenalRule] = {}
    for line, r in _rows(directory, "renal_rules.csv"):
        _known(drugs, "renal_rules.csv", line, r["drug"], "drug")
        _require(r["drug"] not in renal, "renal_rules.csv", line, f"second rule for {r['drug']!r}")
        _require(
            r["egfr_below"].isdigit() and 0 < int(r["egfr_below"]) < 150,
            "renal_rules.csv",
            line,
            f"egfr_below {r['egfr_below']!r} is not an integer in (0, 150)",
        )
        _require(
            r["action"] in ("reduce", "avoid"), "renal_rules.csv", line, f"action {r['action']!r} not reduce/avoid"
        )
        renal[r["drug"]] = RenalRule(r["drug"], int(r["egfr_below"]), r["action"], r["note"])
    return renal


def _contraindications(directory: Path, drugs: dict[str, Drug], conditions: dict[str, str]) -> dict[str, dict]:
    contraindications: dict[str, dict[str, str]] = {}
    for line, r in _rows(directory, "contraindications.csv"):
        _known(drugs, "contraindications.csv", line, r["drug"], "drug")
        _require(
            r["condition"] in conditions,
            "contraindications.csv",
            line,
            f"condition {r['condition']!r} not in conditions.csv",
        )
        _require(
            drugs[r["drug"]].indication != r["condition"],
            "contraindications.csv",
            line,
            f"{r['drug']} cannot be contraindicated in its own indication",
        )
        contraindications.setdefault(r["drug"], {})[r["condition"]] = r["reason"]
    return contraindications


def _alternatives(directory: Path, drugs: dict[str, Drug]) -> dict[str, list[str]]:
    alternatives: dict[str, list[str]] = {}
    for line, r in _rows(directory, "alternatives.csv"):
        _known(drugs, "alternatives.csv", line, r["drug"], "drug")
        _known(drugs, "alternatives.csv", line, r["alternative"], "alternative")
        _require(
            drugs[r["drug"]].indication == drugs[r["alternative"]].indication,
            "alternatives.csv",
            line,
            f"{r['alternative']} does not share the indication of {r['drug']}",
        )
        _require(r["alternative"] not in alternatives.get(r["drug"], []), "alternatives.csv", line, "duplicate row")
        alternatives.setdefault(r["drug"], []).append(r["alternative"])
    return alternatives


@lru_cache(maxsize=1)
def default_kb() -> KnowledgeBase:
    return load_kb(DATA_DIR)
