"""Runs recorded before `rl.algorithm` (their manifests and RL stage records in the old layout: `grpo.mode:
aggrevate`, `grpo.rounds`, `grpo.validate_every`, ...) still load, summarise and gate: `lib.config.migrate_config`
is the one translation, used by every reader of a recorded config. A GRPO run committed under outputs/, and an
AggreVaTe run rebuilt from the claim run's committed records (docs/lab/grpo_arms/sm-pg-s4-agg: its stage records,
its manifest's config made of them, since the run folder itself is not committed)."""

import json
import shutil
from pathlib import Path

import pytest

from lib.config import load_config, migrate_config, rl_label, rl_stage_params
from lib.gate import GateFailure, _manifest, run_gate
from lib.runs import read_config
from tests.committed import CLAIM_RUN

REPO = Path(__file__).resolve().parents[1]
GRPO_RUN = REPO / "outputs" / "20261126-161448-cpu-smoke"
AGG_RECORDS = REPO / "docs" / "lab" / "grpo_arms" / "sm-pg-s4-agg"


def test_migrate_config_moves_the_rl_settings_and_names_the_algorithm():
    old = {
        "seed": 4,
        "grpo": {"mode": "aggrevate", "rounds": 2, "validate_every": 1, "keep": "last", "max_steps": 200, "top_k": 0},
    }
    new = migrate_config(old)
    assert new == {
        "seed": 4,
        "rl": {"algorithm": "aggrevate", "validate_every": 1, "keep": "last"},
        "grpo": {"max_steps": 200},  # mode aggrevate is no GRPO mode; retired grpo.top_k dropped
        "aggrevate": {"rounds": 2},
    }
    assert old["grpo"]["mode"] == "aggrevate"  # a copy: the record is untouched
    step = migrate_config({"grpo": {"mode": "multi_turn", "alarm_drop": 0.1}})
    assert step == {"grpo": {"mode": "multi_turn"}, "rl": {"algorithm": "grpo", "alarm_drop": 0.1}}
    today = load_config("cpu-smollm2-polyguard").model_dump(mode="json")
    assert migrate_config(today) == today  # today's layout passes through


def test_a_committed_grpo_run_loads_gates_and_is_named_rl_grpo(tmp_path):
    manifest = json.loads((GRPO_RUN / "manifest.json").read_text())
    assert "rl" not in manifest["config"] and "validate_every" in manifest["config"]["grpo"]  # the old layout
    config = read_config(GRPO_RUN)
    assert (config.rl.algorithm, config.rl.validate_every, config.grpo.mode) == ("grpo", 20, "step")
    assert rl_label(config) == rl_label(manifest["config"]) == "RL (GRPO)"
    run = shutil.copytree(GRPO_RUN, tmp_path / GRPO_RUN.name)
    manifest["corpus_hashes"] = {}  # committed without its corpus files (size): the gate could only say so
    (run / "manifest.json").write_text(json.dumps(manifest))
    verdict = {c["name"]: c for c in run_gate(run, write=False)["checks"]}
    before = {c["name"]: c["passed"] for c in json.loads((GRPO_RUN / "gate.json").read_text())["checks"]}
    assert verdict["manifest_valid"]["passed"], verdict["manifest_valid"]["detail"]  # stage params vs the manifest
    for name in ("improved", "beats_teacher", "improvement_claim_supported", "anti_hacking_passed"):
        assert verdict[name]["passed"] == before[name], name
    # the comparison still bites: the old record's validate_every is the manifest's rl.validate_every
    record = json.loads((run / "grpo" / "stage.json").read_text())
    record["params"]["validate_every"] = 7
    (run / "grpo" / "stage.json").write_text(json.dumps(record))
    with pytest.raises(GateFailure, match=r"grpo/stage.json ran with other settings .*\['rl.validate_every'\]"):
        _manifest(run)


def _old_aggrevate_run(tmp_path: Path) -> Path:
    """The claim run's records as a run folder in the old layout: its manifest's config is today's profile with the
    seed, the sft, eval and grpo sections its stage records ran with (the grpo section holding mode aggrevate,
    rounds, validate_every and keep), and no rl or aggrevate section."""
    run = tmp_path / "sm-pg-s4-agg"
    records = {"sft": "sft_stage.json", "grpo": "stage.json", "evaluate": "evaluate_stage.json"}
    for stage, name in records.items():
        (run / stage).mkdir(parents=True)
        shutil.copy2(AGG_RECORDS / name, run / stage / "stage.json")
    shutil.copy2(AGG_RECORDS / "eval.json", run / "evaluate" / "eval.json")
    shutil.copy2(AGG_RECORDS / "validation.jsonl", run / "grpo" / "validation.jsonl")
    params = {stage: json.loads((run / stage / "stage.json").read_text())["params"] for stage in records}
    config = load_config("cpu-smollm2-polyguard").model_dump(mode="json")
    del config["rl"], config["aggrevate"]
    config.update(seed=4, sft=params["sft"], grpo=params["grpo"], eval=params["evaluate"])
    stages = {stage: {"status": "ok"} for stage in records}
    manifest = {"run_id": run.name, "config": config, "corpus_hashes": {}, "stages": stages}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_an_aggrevate_run_in_the_old_layout_loads_gates_its_params_and_is_named_rl_aggrevate(tmp_path):
    from lib.reporting.figures import rl_mode
    from lib.reporting.report import _rl_signal_lines
    from lib.reporting.summary import seed_table

    run = _old_aggrevate_run(tmp_path)
    recorded = json.loads((run / "manifest.json").read_text())["config"]
    assert recorded["grpo"]["mode"] == "aggrevate" and "rl" not in recorded
    config = read_config(run)
    assert (config.rl.algorithm, config.aggrevate.rounds, config.rl.validate_every, config.rl.keep) == (
        "aggrevate",
        1,
        1,
        "last",
    )
    # what the claim run recorded is exactly today's profile's RL settings
    today = load_config("cpu-smollm2-polyguard")
    assert rl_stage_params(config) == rl_stage_params(today) and config.grpo == today.grpo
    assert rl_label(config) == rl_label(recorded) == "RL (AggreVaTe)" and rl_mode(run) == "aggrevate"
    assert "The RL stage is one AggreVaTe round" in "".join(
        _rl_signal_lines(json.loads((run / "manifest.json").read_text()))
    )
    assert "| polyguard | 4 | RL (AggreVaTe) | holdout |" in seed_table([run], splits=("holdout",))
    assert "3 stages recorded and on disk, each run with the manifest's config" in _manifest(run)
    # the comparison bites on the algorithm's own section: a record of two rounds is not this manifest's run
    record = json.loads((run / "grpo" / "stage.json").read_text())
    record["params"]["rounds"] = 2
    (run / "grpo" / "stage.json").write_text(json.dumps(record))
    with pytest.raises(GateFailure, match=r"\['aggrevate.rounds'\]"):
        _manifest(run)


def test_a_stage_record_in_todays_layout_gates_against_the_old_layouts_manifest(tmp_path):
    """A stage re-run today on an old run records {rl, aggrevate}; the old manifest, migrated, is the same config."""
    run = _old_aggrevate_run(tmp_path)
    record = json.loads((run / "grpo" / "stage.json").read_text())
    record["params"] = rl_stage_params(read_config(run))
    assert set(record["params"]) == {"rl", "aggrevate"}
    (run / "grpo" / "stage.json").write_text(json.dumps(record))
    assert "each run with the manifest's config" in _manifest(run)


def test_the_report_the_gate_and_the_tables_name_the_algorithm_that_ran(tmp_path):
    """One label (`lib.config.rl_label`) names the RL stage's model wherever a reader meets it; the data keys
    (`grpo`, `grpo-teacher`) and the gate's check names stay as every committed run has them."""
    from lib.gate import CHECKS, _improved
    from lib.reporting.report import headline, paired_table, policy_table

    run = _old_aggrevate_run(tmp_path)
    report = json.loads((run / "evaluate" / "eval.json").read_text())
    label = rl_label(read_config(run))
    assert _improved(run).startswith("RL (AggreVaTe) - SFT +0.273, paired 95% CI")
    said = headline(report, label)
    assert "RL (AggreVaTe) returned" in said and "RL (AggreVaTe) - teacher = +" in said and "GRPO" not in said
    assert {"RL (AggreVaTe) - SFT", "RL (AggreVaTe) - teacher", "SFT - teacher"} <= set(
        paired_table(report, label)["difference"]
    )
    assert "RL (AggreVaTe)" in set(policy_table(report, "holdout", label)["policy"])
    assert "grpo" in set(policy_table(report, "holdout")["policy"])  # no label: the data keys
    assert {"improved", "beats_teacher", "grpo_artifact_ok", "manifest_valid"} <= set(CHECKS)
    grpo = shutil.copytree(GRPO_RUN, tmp_path / GRPO_RUN.name)
    detail = {c["name"]: c["detail"] for c in run_gate(grpo, write=False)["checks"]}["improved"]
    assert "RL (GRPO) - SFT" in detail, detail


def test_the_committed_aggrevate_claim_run_replays_its_evaluated_episodes(tmp_path):
    """The claim run (an AggreVaTe run, committed slimmed: its episodes gzipped, no merged weights) records its replay
    from the gzipped episodes file, and every replayed episode returns what the evaluation scored."""
    from lib.serve import replay

    run_dir = tmp_path / "claim"
    shutil.copytree(CLAIM_RUN, run_dir)
    assert not (run_dir / "evaluate" / "episodes.jsonl").exists() and not (run_dir / "sft" / "model").exists()
    summary = replay.record(run_dir)
    assert summary["source"] == "evaluate/episodes.jsonl"
    config = read_config(run_dir)
    assert config.rl.algorithm == "aggrevate"
    played = replay.load(run_dir, config.spec)
    evaluated = json.loads((run_dir / "evaluate" / "eval.json").read_text())["splits"]
    for split in ("holdout", "holdout_novel"):
        n, mean = evaluated[split]["policies"]["grpo"]["n"], evaluated[split]["policies"]["grpo"]["mean_return"]
        returns = [played.play(split, seed) for seed in range(n)]
        assert sum(r["misses"] for r in returns) == 0
        assert abs(sum(r["episode_return"] for r in returns) / n - mean) < 1e-9
