"""The strict gate: `python -m lib gate outputs/<run_id>` re-checks a finished run from its files and exits
non-zero listing every failed check. Notebook 07_report runs it and shows the verdict; writes `gate.json`.
It stands below export (a package is verified by the gate on its unpacked copy) and reporting (the report shows the
verdict): it reads the run's files, and plays nothing (only `closed_loop.check_provenance` is borrowed).

Checks recompute what they can (weight shas, provenance of every evaluated action) instead of trusting the
stage records. The `improved` and `beats_teacher` checks are the only ones that depend on the training outcome.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import migrate_config, rl_label, rl_stage_params
from .io import atomic_write_json, read_records, stored_bytes, stored_path, weights_sha256
from .runs import DamagedRunError, manifest_config, read_json_record, read_stage_record

ACCEPTED_BACKENDS = ("trl_transformers", "trl_unsloth")
OUTCOME_CHECKS = ("improved", "beats_teacher")  # depend on whether training worked, not on whether the run is honest


# Each stage's recorded params, as the manifest's config says they must be.
STAGE_PARAMS = {
    "corpus": lambda c: c.corpus.model_dump(mode="json"),
    "baselines": lambda c: {"episodes": c.eval.episodes},
    "sft": lambda c: c.sft.model_dump(mode="json"),
    "grpo": rl_stage_params,  # {rl: ..., the algorithm: ...}
    "evaluate": lambda c: c.eval.model_dump(mode="json"),
    "export": lambda c: c.export.model_dump(mode="json"),
    "postsave": lambda c: {"episodes": c.export.postsave_episodes},
}

# the config section a stage's params are (settings retired since a run was made are left out of the comparison;
# the RL stage's params are its rl section and its algorithm's: `_recorded_sections`)
STAGE_SECTION = {"corpus": "corpus", "sft": "sft", "grpo": "grpo", "evaluate": "eval", "export": "export"}


def _dumped(value):
    """A field's default as a stage record's JSON holds it."""
    return json.loads(json.dumps(value.model_dump(mode="json") if hasattr(value, "model_dump") else value))


def _recorded_sections(stage: str, params: dict, config) -> dict[str, dict]:
    """A stage record's params as {config section: its settings}, in today's layout (`migrate_config`): the RL
    stage's as its rl section and its algorithm's (a record made before rl.algorithm holds one flat grpo section)."""
    if stage != "grpo":
        section = STAGE_SECTION[stage]
        return {section: migrate_config({section: params})[section]}
    migrated = migrate_config(params if "rl" in params else {"grpo": params})
    return {name: migrated.get(name, {}) for name in ("rl", config.rl.algorithm)}


def _params_differ(run_dir: Path, stage: str, config) -> list[str]:
    """The settings where `stage`'s record differs from the manifest's config (dotted, by section where it has one)."""
    base = stage.removesuffix("_no_sft")
    expected = STAGE_PARAMS.get(base)
    if expected is None:
        return []
    params = read_json_record(run_dir / stage / "stage.json", "stage record").get("params") or {}
    if base not in STAGE_SECTION:
        wanted = expected(config)
        return sorted(k for k in set(params) | set(wanted) if params.get(k) != wanted.get(k))
    keys = []
    for section, recorded in _recorded_sections(base, params, config).items():
        fields = type(getattr(config, section)).model_fields
        # a setting added since the stage ran, at its default, is what the stage did
        wanted = {
            k: v
            for k, v in getattr(config, section).model_dump(mode="json").items()
            if k in recorded or k not in fields or fields[k].is_required() or _dumped(fields[k].default) != v
        }
        prefix = f"{section}." if base == "grpo" else ""
        keys += [prefix + k for k in sorted(set(recorded) | set(wanted)) if recorded.get(k) != wanted.get(k)]
    return keys


class GateFailure(Exception):
    """One gate check did not hold."""


def _require(condition: bool, message: str) -> None:
    if not condition:  # not `assert`: python -O must never turn the gate's checks off
        raise GateFailure(message)


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


def _read(run_dir: Path, relative: str) -> dict:
    path = run_dir / relative
    if not path.exists():
        raise FileNotFoundError(f"missing {relative}")
    if relative.endswith("/stage.json"):  # its paths are relative to the run folder, wherever that now is
        return read_stage_record(run_dir, relative.split("/")[0])
    return read_json_record(path, relative)


def _manifest(run_dir: Path) -> str:
    """manifest.json exists, parses, holds a valid config, lists every stage with the status its record has, and
    its corpus hashes are the corpus files' own."""
    path = run_dir / "manifest.json"
    manifest = read_json_record(path, "the run's manifest")
    config = manifest_config(manifest, path)
    recorded = manifest.get("stages")
    _require(isinstance(recorded, dict), f"{path}: no 'stages' recorded")
    on_disk = {
        p.parent.name: read_json_record(p, "stage record").get("status") for p in sorted(run_dir.glob("*/stage.json"))
    }
    _require(
        set(on_disk) <= set(recorded), f"{path}: stages {sorted(set(on_disk) - set(recorded))} ran but are not recorded"
    )
    mismatched = {k: (recorded[k].get("status"), v) for k, v in on_disk.items() if recorded[k].get("status") != v}
    _require(not mismatched, f"{path}: stage status in manifest vs stage.json differ: {mismatched}")
    missing = sorted(set(recorded) - set(on_disk))
    _require(not missing, f"{path}: stages {missing} are recorded but their stage.json is missing")
    for name, digest in (manifest.get("corpus_hashes") or {}).items():
        kept = run_dir / "corpus" / name  # or gzipped beside it: the hash is the file's own either way
        actual = hashlib.sha256(stored_bytes(kept)).hexdigest() if stored_path(kept) else "missing"
        _require(actual == digest, f"corpus/{name}: sha256 {actual[:12]} is not the {digest[:12]} the manifest records")
    differ = {}
    for stage in on_disk:
        keys = _params_differ(run_dir, stage, config)
        if keys:
            differ[stage] = keys
    _require(
        not differ,
        "; ".join(
            f"{stage}/stage.json ran with other settings than {path}'s config: {keys}" for stage, keys in differ.items()
        ),
    )
    return (
        f"profile {config.profile}, env {config.env}, {len(recorded)} stages recorded and on disk, each run with "
        "the manifest's config, corpus hashes match"
    )


EPISODES = "evaluate/episodes.jsonl"


def reread_files(run_dir: Path, manifest: dict) -> list[str]:
    """The files the gate re-reads beyond the small records: the corpus files whose hashes the manifest records
    (`manifest_valid`) and, once the run has an evaluation, its episodes (`every_action_has_provenance`). A run
    folder trimmed of them (the committed reference runs) cannot pass those two checks."""
    needed = [f"corpus/{name}" for name in sorted(manifest.get("corpus_hashes") or {})]
    return needed + ([EPISODES] if (Path(run_dir) / "evaluate" / "eval.json").is_file() else [])


def _backends(run_dir: Path) -> str:
    found = {stage: _read(run_dir, f"{stage}/stage.json")["metrics"].get("backend") for stage in ("sft", "grpo")}
    bad = {s: b for s, b in found.items() if b not in ACCEPTED_BACKENDS}
    _require(not bad, f"backends not accepted: {bad} (accepted: {list(ACCEPTED_BACKENDS)})")
    return f"sft={found['sft']}, {_label(run_dir)} (grpo/)={found['grpo']}"


def _label(run_dir: Path) -> str:
    """The RL stage as the gate's texts name it: "RL (GRPO)" or "RL (AggreVaTe)" (`lib.config.rl_label`)."""
    return rl_label(_read(run_dir, "manifest.json")["config"])


def _grpo_artifact(run_dir: Path) -> str:
    grpo = _read(run_dir, "grpo/stage.json")
    _require(grpo["status"] == "ok", f"grpo status is {grpo['status']!r}")
    actual = weights_sha256(Path(grpo["outputs"]["adapter"]))
    _require(
        actual == grpo["metrics"]["adapter_sha256"],
        f"adapter sha256 {actual[:12]} != recorded {grpo['metrics']['adapter_sha256'][:12]}",
    )
    return f"{_label(run_dir)}: status ok, adapter sha256 {actual[:12]} matches"


def _merged_on_disk(run_dir: Path, merged: Path, recorded: str) -> tuple[str, str]:
    """The merged folder's weights sha and how it got there. A committed run keeps its adapters, not its merged
    folders: they are rebuilt here (lib/merging.py) and checked, by sha where this CPU gives the same bits, else by
    the merged model's outputs against the recorded ones within export.logit_tolerance. Never skipped."""
    from .merging import MergeError, rebuild_missing, rebuilt_record

    if not merged.exists():
        try:
            rebuild_missing(run_dir)
        except (MergeError, DamagedRunError, FileNotFoundError, KeyError) as error:
            raise GateFailure(
                f"{merged.parent.name}/{merged.name} is missing and could not be rebuilt from the run's adapters: "
                f"{error}"
            ) from None
    on_disk, note = weights_sha256(merged), rebuilt_record(merged)
    if note is None or note["sha256"] == recorded:
        return on_disk, "" if note is None else "rebuilt from the run's adapters, bit-identical; "
    check = note.get("check") or {}
    _require(
        on_disk == note["sha256"] and bool(check.get("agree")),
        f"{merged} was rebuilt from the run's adapters with other bits than recorded ({on_disk[:12]} against "
        f"{recorded[:12]}) and its outputs do not agree with the recorded ones within tolerance: {check}",
    )
    return recorded, (
        f"rebuilt from the run's adapters: sha256 {on_disk[:12]} differs from the recorded {recorded[:12]} (this "
        f"CPU's float arithmetic), its logits within {check['max_abs_logit_diff']:.1e} of the recorded outputs "
        f"(tolerance {check['tolerance']}), {check['greedy_texts_equal']}/{check['prompts']} greedy texts equal; "
    )


def _postsave(run_dir: Path) -> str:
    result = _read(run_dir, "postsave/postsave_inference.json")
    export = _read(run_dir, "export/export_manifest.json")
    merged = Path(_read(run_dir, "export/stage.json")["outputs"]["merged"])
    on_disk, how = _merged_on_disk(run_dir, merged, export["weights_sha256"])
    _require(
        result["model_source"]["sha256"] == export["weights_sha256"] == on_disk,
        f"post-save loaded {result['model_source']['sha256'][:12]}, "
        f"export manifest says {export['weights_sha256'][:12]}, "
        f"disk has {on_disk[:12]}",
    )
    _require(result["actions"] == result["actions_with_source"], "some post-save actions have no model_source")
    return (
        f"{how}{result['episodes']} episodes from {merged.name} (sha256 {on_disk[:12]}), "
        f"validity {result['validity_rate']:.2f}"
    )


def _provenance(run_dir: Path) -> str:
    from .evaluation.closed_loop import check_provenance

    report = _read(run_dir, "evaluate/eval.json")
    grpo = _read(run_dir, "grpo/stage.json")
    _require(
        report["artifacts"]["grpo"]["sha256"] == grpo["metrics"]["adapter_sha256"],
        "eval.json's RL-stage artifact (grpo) is not the adapter the grpo stage trained",
    )
    path = run_dir / EPISODES
    _require(stored_path(path) is not None, f"missing {EPISODES} (nor {EPISODES}.gz)")
    records = read_records(path)
    check_provenance(records, report["artifacts"])
    actions = sum(len(r["actions"]) for r in records)
    return f"{actions} actions in {len(records)} episodes, each from its evaluated source"


def _anti_hacking(run_dir: Path) -> str:
    report = _read(run_dir, "evaluate/anti_hacking_report.json")
    failed = [k for k, a in report["attacks"].items() if not a["passed"]]
    _require(len(report["attacks"]) >= 10, f"only {len(report['attacks'])} attack kinds")
    _require(not failed, f"attack kinds scoring above the worst legal action: {failed}")
    return f"{len(report['attacks'])} attack kinds, all at or below the worst legal action"


def _claim_honest(run_dir: Path) -> str:
    report = _read(run_dir, "evaluate/eval.json")
    details = []
    for claim, pair in (("improved", "grpo-sft"), ("beats_teacher", "grpo-teacher")):
        paired = report["splits"]["holdout"]["paired"][pair]
        _require(
            report[claim] == (paired["ci95"][0] > 0),
            f"eval.json says {claim}={report[claim]} but the {pair} paired CI is {paired['ci95']}",
        )
        details.append(f"{claim}={report[claim]} matches {pair} paired CI {_ci(paired)}")
    if "baselines" in report:  # a run from before 2026-12-06 pairs its RL policy with the teacher alone
        from .evaluation.evaluate import baselines_beaten

        said, found = report["baselines"], baselines_beaten(report["splits"], report["roles"])
        _require(said == found, f"eval.json's baselines {said} are not what its paired CIs show: {found}")
        every = bool(found) and not any(v["does_not_beat"] for v in found.values())
        _require(
            report["beats_every_baseline"] == every,
            f"eval.json says beats_every_baseline={report['beats_every_baseline']} but its pairs say {every}",
        )
        missed = sorted({name for v in found.values() for name in v["does_not_beat"]})
        details.append(f"beats_every_baseline={every} matches the scripted pairs (not beaten: {missed or 'none'})")
    return "; ".join(details)


def _above_zero(run_dir: Path, pair: str, other: str, failure: str) -> str:
    """The holdout paired difference `pair` (the RL stage's model minus `other`, shown with the algorithm that ran:
    "RL (AggreVaTe) - teacher") has its 95% CI above zero."""
    label = f"{_label(run_dir)} - {other}"
    paired = _read(run_dir, "evaluate/eval.json")["splits"]["holdout"]["paired"][pair]
    _require(
        paired["ci95"][0] > 0,
        f"{failure}: {label} on holdout is {paired['mean']:+.3f}, paired 95% CI {_ci(paired)} does not lie above zero",
    )
    return f"{label} {paired['mean']:+.3f}, paired 95% CI {_ci(paired)} above zero"


def _improved(run_dir: Path) -> str:
    return _above_zero(run_dir, "grpo-sft", "SFT", "not improved")


def _beats_teacher(run_dir: Path) -> str:
    return _above_zero(run_dir, "grpo-teacher", "teacher", "does not beat the teacher")


def _ci(paired: dict) -> str:
    return "[{:+.3f}, {:+.3f}]".format(*paired["ci95"])


CHECKS = {
    "manifest_valid": _manifest,
    "backends_accepted": _backends,
    "grpo_artifact_ok": _grpo_artifact,
    "postsave_from_saved_artifact": _postsave,
    "every_action_has_provenance": _provenance,
    "anti_hacking_passed": _anti_hacking,
    "improvement_claim_supported": _claim_honest,
    "improved": _improved,
    "beats_teacher": _beats_teacher,
}


def require_run_folder(run_dir: Path | str) -> Path:
    """`python -m lib gate`'s input check: a folder with a manifest.json, else FileNotFoundError saying which (the
    checks would only list every one failed, and writing gate.json would make the folder)."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise FileNotFoundError(f"{run_dir} does not exist: give a run folder, e.g. outputs/<run_id>")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a folder: give a run folder, e.g. outputs/<run_id>")
    if not (run_dir / "manifest.json").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (missing {run_dir / 'manifest.json'})")
    return run_dir


def run_gate(run_dir: Path | str, write: bool = True) -> dict:
    """Run every check; a check fails on any error (a missing file included). Writes <run>/gate.json."""
    run_dir = Path(run_dir)
    checks = []
    for name, check in CHECKS.items():
        try:
            checks.append(Check(name, True, check(run_dir)))
        except GateFailure as failure:
            checks.append(Check(name, False, str(failure)))
        except (FileNotFoundError, KeyError, RuntimeError, ValueError, DamagedRunError) as error:
            checks.append(Check(name, False, f"{type(error).__name__}: {error}"))
    verdict = {
        "run_dir": str(run_dir),
        "passed": all(c.passed for c in checks),
        "integrity_passed": all(c.passed for c in checks if c.name not in OUTCOME_CHECKS),
        "improved": next(c.passed for c in checks if c.name == "improved"),
        "beats_teacher": next(c.passed for c in checks if c.name == "beats_teacher"),
        "checks": [asdict(c) for c in checks],
    }
    if write:
        atomic_write_json(run_dir / "gate.json", verdict)
    return verdict


def format_verdict(verdict: dict) -> str:
    lines = [f"gate {'PASSED' if verdict['passed'] else 'FAILED'}: {verdict['run_dir']}"]
    lines += [f"  [{'ok' if c['passed'] else 'FAIL'}] {c['name']}: {c['detail']}" for c in verdict["checks"]]
    return "\n".join(lines)


def _gate(args) -> int:
    verdict = run_gate(require_run_folder(args.run_dir))
    print(format_verdict(verdict))
    return 0 if verdict["passed"] else 1


def add_verbs(verbs) -> None:
    """`python -m lib gate RUN` (registered by lib/__main__.py)."""
    g = verbs.add_parser("gate", help="re-check a finished run; exits non-zero listing every failed check")
    g.add_argument("run_dir", type=Path)
    g.set_defaults(func=_gate)
