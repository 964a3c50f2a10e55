"""Evaluation, anti-hacking, export, post-save and activate on a micro run (corpus -> sft -> grpo -> evaluate ->
export -> postsave), including every failure path the issue names."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lib.config import load_config
from lib.envs.base import format_action
from lib.evaluation import antihack
from lib.evaluation.closed_loop import ProvenanceError, check_provenance
from lib.evaluation.evaluate import baseline_pair, run_evaluate
from lib.export.merge import ExportExistsError, compare_outputs, merge_adapter, run_export
from lib.export.postsave import PostsaveError, activate, load_active, run_postsave
from lib.models import weights_sha256
from lib.runs import Run
from tests import micro

pytestmark = pytest.mark.slow  # every test here trains or loads a model (make test-fast skips them)

MICRO = {
    **micro.MICRO,
    **micro.MICRO_EVAL,
    "eval.train_episodes": 4,
    "eval.ablation_episodes": 4,
    "eval.ablations": ["sampled", "free_text", "veto", "no_sft"],
    "eval.untrained_episodes": 3,  # a reference row: fewer episodes than the policies it is no verdict on
}
BASELINES = ["random", "heuristic", "oracle", "always_finish"]


def _perturb_adapter(run):
    """Micro GRPO barely moves LoRA B from zero; give the adapter real weights so the merge check is not vacuous."""
    record_path = run.dir / "grpo" / "stage.json"
    record = json.loads(record_path.read_text())
    weights_path = Path(run.read_stage("grpo")["outputs"]["adapter"]) / "adapter_model.safetensors"
    generator = torch.Generator().manual_seed(0)
    weights = {
        k: (torch.randn(v.shape, generator=generator) * 0.05 if "lora_B" in k else v)
        for k, v in load_file(weights_path).items()
    }
    save_file(weights, weights_path)
    record["metrics"]["adapter_sha256"] = weights_sha256(weights_path.parent)
    record_path.write_text(json.dumps(record))


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    return micro.finished_run(MICRO, tmp_path_factory.mktemp("outputs") / "run", BASELINES, _perturb_adapter)


def test_the_no_sft_ablation_is_trained_by_the_grpo_stage_and_only_loaded_by_evaluation(done):
    config, run = done
    manifest = json.loads((run.dir / "manifest.json").read_text())
    stages = list(manifest["stages"])
    assert stages.index("grpo_no_sft") < stages.index("evaluate")  # trained before evaluation ran
    log = [json.loads(line) for line in (run.dir / "run_log.jsonl").read_text().splitlines()]
    starts = [r for r in log if r["event"] == "grpo_no_sft_start"]
    done_evaluate = next(i for i, r in enumerate(log) if r.get("stage") == "evaluate")
    assert len(starts) == 1 and log.index(starts[0]) < done_evaluate


def test_an_ablation_without_its_model_says_so_and_evaluation_never_trains(tmp_path, monkeypatch):
    """No grpo_no_sft/ in the run: the no_sft row is labelled "not trained in this run" (and the report's table
    renders it); nothing is trained."""
    from types import SimpleNamespace

    import lib.training.grpo as grpo
    from lib.evaluation.ablations import NOT_TRAINED, run_ablations
    from lib.reporting.report import ablation_table

    monkeypatch.setattr(grpo, "train_grpo", lambda *a, **k: pytest.fail("evaluation trained a model"))
    config = load_config("cpu-smoke", {**MICRO, "eval.ablations": ["no_sft"]})
    results = run_ablations(config, SimpleNamespace(dir=tmp_path), {}, {}, [], 200)
    row = results["no_sft"]
    assert row["status"] == NOT_TRAINED == "not trained in this run" and NOT_TRAINED in row["policy"]
    assert "grpo_no_sft/ is missing" in row["why"] and row["n"] == 0
    assert row["mean_return"] is None and json.loads(json.dumps(row, allow_nan=False)) == row  # valid JSON, no NaN
    assert NOT_TRAINED in ablation_table({"ablations": results}).to_markdown(index=False)
    assert not list(tmp_path.iterdir())


def _records(run):
    return [json.loads(line) for line in (run.dir / "evaluate" / "episodes.jsonl").read_text().splitlines()]


def test_eval_json_covers_models_baselines_splits_and_paired_differences(done):
    config, run = done
    report = json.loads((run.dir / "evaluate" / "eval.json").read_text())
    assert set(report["splits"]) == {"holdout", "holdout_novel", "train"}
    for split in report["splits"].values():
        assert set(split["policies"]) == {"untrained", "sft", "grpo", "improver", *BASELINES}
        assert split["policies"]["improver"]["kind"] == "reference"
        assert all(split["policies"][m]["invalid_rate"] == 0 for m in ("untrained", "sft", "grpo"))  # candidates
        # the teacher (heuristic) is paired by its role; every other scripted policy by its name
        assert set(split["paired"]) == {
            "grpo-sft",
            "grpo-teacher",
            "sft-teacher",
            *(f"grpo-{name}" for name in BASELINES if name != "heuristic"),
        }
        assert (
            split["policies"]["untrained"]["n"] == 3 < split["policies"]["grpo"]["n"] == split["policies"]["sft"]["n"]
        )
        for summary in split["policies"].values():
            lo, hi = summary["ci95"]
            assert lo <= summary["mean_return"] <= hi
            assert {"components", "invalid_rate", "mean_steps", "latency_s_per_action"} <= set(summary)
    assert (
        report["splits"]["holdout"]["policies"]["oracle"]["mean_return"]
        > report["splits"]["holdout"]["policies"]["random"]["mean_return"]
    )
    assert report["improved"] == (report["splits"]["holdout"]["paired"]["grpo-sft"]["ci95"][0] > 0)
    assert set(report["baselines"]) == {"holdout", "holdout_novel"}  # held-out splits only
    for name, verdict in report["baselines"].items():
        assert sorted(verdict["beats"] + verdict["does_not_beat"]) == sorted(set(BASELINES) - {"oracle"})
        for beaten in verdict["beats"]:
            assert report["splits"][name]["paired"][baseline_pair(beaten, report["roles"])]["ci95"][0] > 0
    assert report["beats_every_baseline"] == (not any(v["does_not_beat"] for v in report["baselines"].values()))
    assert report["backends"] == {"sft": "trl_transformers", "grpo": "trl_transformers"}
    assert set(report["ablations"]) == {"sampled", "free_text", "veto", "no_sft"}
    assert report["ablations"]["veto"]["veto_retries_per_action"] >= 0
    assert 0 <= report["ablations"]["free_text"]["invalid_rate"] <= 1  # the validity diagnostic of free text
    assert report["roles"]["improver"] == "improver"
    holdout = report["splits"]["holdout"]
    assert "gap_closure_improver" in holdout and "gap_closure" in holdout
    assert json.loads((run.dir / "grpo_no_sft" / "stage.json").read_text())["inputs"]["base_model"].endswith(
        "base_model"
    )
    records = _records(run)
    assert {r["policy"] for r in records} >= {"untrained", "sft", "grpo", "grpo_no_sft", *BASELINES}
    grpo_actions = [a for r in records if r["policy"] == "grpo" for a in r["actions"]]
    assert grpo_actions and all(
        a["model_source"]["sha256"] == report["artifacts"]["grpo"]["sha256"] for a in grpo_actions
    )
    check_provenance(records, report["artifacts"])  # the written file passes its own check


def test_the_evaluate_notebooks_tables_name_a_split_the_run_left_out(done):
    """A run with eval.splits [holdout] has no holdout_novel table: the notebook's cell says so instead of failing."""
    from lib.reporting.report import policy_table

    config, run = done
    report = json.loads((run.dir / "evaluate" / "eval.json").read_text())
    table = policy_table(report, "holdout_novel")
    assert set(table["policy"]) >= {"sft", "grpo"}
    report["splits"] = {"holdout": report["splits"]["holdout"]}
    left_out = policy_table(report, "holdout_novel")
    assert left_out["policy"].tolist() == ["holdout_novel was not evaluated in this run (eval.splits: holdout)"]
    assert set(policy_table(report, "holdout")["policy"]) >= {"sft", "grpo"}


def test_a_planted_fallback_or_a_missing_source_fails_the_provenance_check(done):
    config, run = done
    artifacts = json.loads((run.dir / "evaluate" / "eval.json").read_text())["artifacts"]
    records = _records(run)
    planted = json.loads(json.dumps(records))
    grpo = next(r for r in planted if r["policy"] == "grpo")
    grpo["actions"][0]["model_source"] = {"policy": "heuristic"}  # a heuristic answered for the model
    with pytest.raises(ProvenanceError, match="fallback"):
        check_provenance(planted, artifacts)
    missing = json.loads(json.dumps(records))
    del next(r for r in missing if r["policy"] == "sft")["actions"][0]["model_source"]
    with pytest.raises(ProvenanceError, match="no model_source"):
        check_provenance(missing, artifacts)
    flagged = json.loads(json.dumps(records))
    next(r for r in flagged if r["policy"] == "sft")["actions"][0]["fallback"] = True
    with pytest.raises(ProvenanceError):
        check_provenance(flagged, artifacts)


def test_evaluation_fails_loudly_when_an_action_loses_its_source(done, monkeypatch, tmp_path):
    import lib.evaluation.evaluate as evaluate

    config, run = done
    real = evaluate.run_model_episodes

    def leaky(*args, **kwargs):
        episodes, actions = real(*args, **kwargs)
        actions[0] = {k: v for k, v in actions[0].items() if k != "model_source"}
        return episodes, actions

    target = tmp_path / "copy"
    shutil.copytree(run.dir, target)
    config = load_config("cpu-smoke", {**MICRO, "eval.ablations": [], "eval.splits": ["holdout"]})
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["config"] = config.model_dump(mode="json")
    (target / "manifest.json").write_text(json.dumps(manifest))
    (target / "evaluate" / "eval.json").unlink()
    monkeypatch.setattr(evaluate, "run_model_episodes", leaky)
    with pytest.raises(ProvenanceError, match="no model_source"):
        run_evaluate(config, Run(target, config), policies=["random"])
    assert not (target / "evaluate" / "eval.json").exists()


def test_every_attack_kind_scores_at_or_below_the_worst_legal_action(done):
    config, run = done
    report = json.loads((run.dir / "evaluate" / "anti_hacking_report.json").read_text())
    malformed = [k for k, a in report["attacks"].items() if a.get("kind") == "malformed"]
    harmful = [k for k, a in report["attacks"].items() if a.get("kind") == "harmful_legal"]
    assert len(malformed) >= 10 and set(harmful) == {"finish_with_major_risk", "second_pharmacist_review"}
    for name, attack in report["attacks"].items():
        assert attack["states"] > 0, name
        assert attack["passed"] and attack["max_margin_over_worst_legal"] <= antihack.TOLERANCE, (name, attack)
    assert report["all_attacks_passed"]
    assert set(report["train_holdout_gap"]) == {"untrained", "sft", "grpo"}
    assert "always_finish" in report["trivial_policies"]
    assert {"loop", "review_abuse", "unsafe_end", "invalid_rate"} <= set(report["training_rule_hits"])


def test_the_attack_check_can_fail(monkeypatch):
    """Negative control: an 'attack' that is simply the best legal action must be reported as not passing."""
    config = load_config("cpu-smoke")

    def best_legal(cands):
        return (
            format_action(next(c for c in cands if c.kind == "gather").id)
            if any(c.kind == "gather" for c in cands)
            else ""
        )

    monkeypatch.setattr(antihack, "ATTACKS", {"best_legal": best_legal})
    results = antihack.attack_suite(config, seeds=range(3))
    assert results["best_legal"]["passed"] is False and results["best_legal"]["max_margin_over_worst_legal"] > 0


def test_export_refuses_to_overwrite(done):
    config, run = done
    with pytest.raises(ExportExistsError, match="never overwritten"):
        run_export(config, run)
    grpo = run.read_stage("grpo")
    with pytest.raises(ExportExistsError):
        merge_adapter(
            grpo["outputs"]["base_model"], Path(grpo["outputs"]["adapter"]), run.dir / "export" / "merged", config.model
        )


def test_merged_model_agrees_with_the_unmerged_adapter_in_a_fresh_process(done):
    config, run = done
    manifest = json.loads((run.dir / "export" / "export_manifest.json").read_text())
    check = manifest["check"]
    assert check["agree"] and check["greedy_texts_equal"] == check["prompts"] == 3
    assert check["max_abs_logit_diff"] <= check["tolerance"] == 1e-4
    sft_sha = run.read_stage("sft")["metrics"]["weights_sha256"]
    assert manifest["weights_sha256"] != sft_sha  # the adapter really changed the weights
    assert set(manifest["files"]) >= {"model.safetensors", "config.json", "tokenizer.json"}
    assert manifest["hub"].startswith("skipped")
    reference = {"texts": ["a", "b"], "logits": [[0.0, 1.0], [0.0, 1.0]]}
    assert not compare_outputs(reference, {"texts": ["a", "c"], "logits": reference["logits"]})["agree"]
    assert not compare_outputs(reference, {"texts": ["a", "b"], "logits": [[0.0, 1.0], [0.0, 1.1]]})["agree"]


def test_postsave_runs_on_the_exported_artifact(done):
    config, run = done
    result = json.loads((run.dir / "postsave" / "postsave_inference.json").read_text())
    assert result["from_saved_artifact"] and result["model_source"]["path"].endswith("merged")
    assert result["model_source"]["sha256"] == result["export_weights_sha256"]
    assert 0 <= result["validity_rate"] <= 1 and result["latency_s_p95"] >= result["latency_s_p50"] > 0
    assert result["actions"] == result["actions_with_source"] > 0


def test_a_fresh_process_that_fails_is_an_export_error_with_the_end_of_its_console(tmp_path):
    import tempfile

    from lib.export.merge import ExportError, _fresh_process_outputs, _start_fresh_process

    missing = tmp_path / "no-such-run"
    with tempfile.TemporaryFile() as log:
        process = _start_fresh_process(missing, tmp_path / "merged", tmp_path / "p.json", tmp_path / "o.json", log)
        with pytest.raises(ExportError, match=r"(?s)fresh-process reload of .*merged failed:.*no-such-run"):
            _fresh_process_outputs(process, log, tmp_path / "merged", tmp_path / "o.json")
    assert not (tmp_path / "o.json").exists()


def test_each_stage_record_says_where_its_time_went(done):
    """laps_s: the named parts of each stage, each timed once, inside the stage's own duration."""
    _, run = done
    expected = {
        "sft": {"kernel check", "model load", "length check", "trainer set-up", "train", "save", "imitation check"},
        "grpo": {"kernel check", "model load", "trainer set-up", "train", "save"},
        "export": {
            "merge and save",
            "fingerprint",
            "unmerged outputs, the fresh process beside",
            "fresh process: merged outputs, the rest",
        },
        "postsave": {"fresh process"},
    }
    for stage, parts in expected.items():
        record = json.loads((run.dir / stage / "stage.json").read_text())
        assert set(record["laps_s"]) == parts, stage
        assert all(s >= 0 for s in record["laps_s"].values())
        assert sum(record["laps_s"].values()) <= record["duration_s"] + 0.05 * len(parts), stage
    evaluate = json.loads((run.dir / "evaluate" / "stage.json").read_text())["laps_s"]
    splits = done[0].eval.splits
    assert {f"{split}: {name}" for split in splits for name in ("untrained", "sft", "grpo", "scripted policies")} | {
        "model load",
        "ablations",
        "records and anti-hacking report",
    } == set(evaluate)
    assert "grpo_no_sft" not in json.loads((run.dir / "grpo" / "stage.json").read_text())["laps_s"]
    worker = json.loads((run.dir / "postsave" / "postsave_inference.json").read_text())
    assert set(worker["laps_s"]) == {"load", "play"}
    assert worker["batch_size"] == min(done[0].export.postsave_episodes, done[0].eval.batch_size)


def test_postsave_fails_when_the_weights_differ_from_the_export_manifest(done, tmp_path):
    config, run = done
    target = tmp_path / "copy"
    shutil.copytree(run.dir, target)
    export = json.loads((target / "export" / "stage.json").read_text())
    export["outputs"] = {
        "merged": str(target / "export" / "merged"),
        "export_manifest.json": str(target / "export" / "export_manifest.json"),
    }
    (target / "export" / "stage.json").write_text(json.dumps(export))
    sft_weights = Path(run.read_stage("sft")["outputs"]["model"]) / "model.safetensors"
    shutil.copy(sft_weights, target / "export" / "merged" / "model.safetensors")  # swapped after export
    with pytest.raises(PostsaveError, match="not the exported ones"):
        run_postsave(config, Run(target, config))
    assert json.loads((target / "postsave" / "stage.json").read_text())["status"] == "failed: sha mismatch"


def test_activate_resolves_grpo_then_merged_then_sft_and_refuses_changed_weights(done, tmp_path):
    config, run = done
    record = activate(run.dir)
    assert record["artifact"] == "grpo" and record["base"]["sha256"]
    active = run.dir.parent / "active_model.json"
    assert json.loads(active.read_text())["sha256"] == record["sha256"]
    model, tokenizer, source = load_active(run.dir.parent, config.model)
    assert source["sha256"] == record["sha256"]
    assert activate(run.dir, "merged")["path"].endswith("merged")
    assert activate(run.dir, "sft")["artifact"] == "sft"
    with pytest.raises(ValueError, match="unknown artifact"):
        activate(run.dir, "latest")
    with pytest.raises(FileNotFoundError, match="no finished grpo, export or sft"):
        activate(tmp_path / "empty")
    record = json.loads(active.read_text())
    record["sha256"] = "0" * 64
    active.write_text(json.dumps(record))
    with pytest.raises(PostsaveError, match="changed since it was activated"):
        load_active(run.dir.parent, config.model)


def _copy(run, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(run.dir, target)
    return target


def test_gate_passes_every_integrity_check_and_fails_on_tampering(done, tmp_path):
    import subprocess
    import sys

    from lib.gate import OUTCOME_CHECKS, run_gate

    config, run = done
    verdict = run_gate(run.dir, write=False)
    assert all(c["passed"] for c in verdict["checks"] if c["name"] not in OUTCOME_CHECKS), verdict
    assert (
        verdict["integrity_passed"]
        and verdict["improved"] == json.loads((run.dir / "evaluate" / "eval.json").read_text())["improved"]
    )

    copy = _copy(run, tmp_path)
    report = json.loads((copy / "evaluate" / "eval.json").read_text())
    report["improved"] = True  # a claim the CI does not support
    (copy / "evaluate" / "eval.json").write_text(json.dumps(report))
    grpo = json.loads((copy / "grpo" / "stage.json").read_text())
    grpo["metrics"]["adapter_sha256"] = "f" * 64  # the recorded artifact is not the one on disk
    (copy / "grpo" / "stage.json").write_text(json.dumps(grpo))
    anti = json.loads((copy / "evaluate" / "anti_hacking_report.json").read_text())
    anti["attacks"]["empty"]["passed"] = False
    (copy / "evaluate" / "anti_hacking_report.json").write_text(json.dumps(anti))
    (copy / "postsave" / "postsave_inference.json").unlink()
    failed = {c["name"] for c in run_gate(copy)["checks"] if not c["passed"]}
    assert {
        "improvement_claim_supported",
        "grpo_artifact_ok",
        "anti_hacking_passed",
        "postsave_from_saved_artifact",
        "every_action_has_provenance",
    } <= failed  # provenance: eval.json's GRPO sha no longer matches the stage record
    done_cli = subprocess.run([sys.executable, "-m", "lib", "gate", str(copy)], capture_output=True, text=True)
    assert done_cli.returncode == 1 and "[FAIL] grpo_artifact_ok" in done_cli.stdout and (copy / "gate.json").exists()


def test_open_run_keeps_an_existing_runs_config_and_refuses_a_different_one(done):
    from lib.config import ConfigError
    from lib.runs import open_run

    config, run = done
    root, run_id = str(run.dir.parent), run.dir.name
    same, again = open_run(run_id, "", {}, output_root=root)
    assert same == config and again.dir == run.dir
    assert open_run(run_id, "cpu-smoke", {}, output_root=root)[0] == config  # its own profile name is fine
    with pytest.raises(ConfigError, match="was made with profile 'cpu-smoke'"):
        open_run(run_id, "cpu-full", {}, output_root=root)
    with pytest.raises(ConfigError, match="OVERRIDES") as error:
        open_run(run_id, "", {"grpo.max_steps": 99}, output_root=root)
    assert f"grpo.max_steps: {config.grpo.max_steps} -> 99" in str(error.value)  # what differs, by name
    assert "grpo.temperature" not in str(error.value)  # a setting both give alike is not listed


def test_live_episodes_advance_in_lockstep_and_a_finished_slot_takes_the_next_seed(done, monkeypatch):
    import lib.candidates as candidates
    import lib.evaluation.closed_loop as evaluate
    import lib.inference as inference

    config, run = done
    model, tokenizer, source = inference.load_policy_model(run.read_stage("sft")["outputs"]["model"], config.model)
    calls = []
    real = candidates.score_answers

    def spy(model, tokenizer, message_batches, *args, **kwargs):
        calls.append(len(message_batches))
        return real(model, tokenizer, message_batches, *args, **kwargs)

    monkeypatch.setattr(candidates, "score_answers", spy)
    seeds = range(10)
    episodes, actions = evaluate.run_model_episodes(
        config, (model, tokenizer, source), seeds, "holdout", desc="lockstep", batch_size=4
    )
    assert [e.seed for e in episodes] == list(seeds)
    assert sum(calls) == len(actions) == sum(e.steps for e in episodes)  # one scored state per action, none wasted
    assert calls[0] == 4 and max(calls) == 4  # every live episode in one call, never more than batch_size
    # refill: some call after the first serves an episode at its first step next to others further on
    first_steps = [a for a in actions if a["step"] == 1]
    assert len(first_steps) == len(seeds) and len(calls) < len(actions)
    again, _ = evaluate.run_model_episodes(
        config, (model, tokenizer, source), seeds, "holdout", desc="lockstep", batch_size=4
    )
    assert [e.episode_return for e in again] == [e.episode_return for e in episodes]  # deterministic


@pytest.mark.parametrize("full_finetune", [True, False])
def test_bench_gpu_measures_every_phase_and_writes_no_machine_paths(tmp_path, full_finetune):
    """With adapters in SFT (every pretrained profile), the bare loop trains the same adapters."""
    from lib.bench.bench_gpu import run_bench

    overrides = {k: v for k, v in MICRO.items() if not k.startswith(("export", "eval.ablation"))}
    report = run_bench(
        "cpu-smoke",
        {**overrides, "model.sft_full_finetune": full_finetune},
        sft_steps=4,
        grpo_steps=2,
        eval_episodes=6,
        bare_batches=1,
        workdir=tmp_path,
    )
    assert report["sft"]["steps"] == 4 and report["sft"]["tokens_per_s"] > 0
    assert (
        report["sft"]["trainer_inputs"]["forwards"] >= 4 and 0 <= report["sft"]["trainer_inputs"]["padding_share"] < 1
    )
    assert report["bare_forward_backward"]["tokens_per_s"] > 0 and report["sft_stage_vs_bare_ratio"] > 0
    # steady state: step 2 only (steps 0-1 warm up, 3-4 are profiled); the bare loop replays that step's batch
    steady, bare = report["sft"]["steady_state"], report["bare_forward_backward"]
    assert steady["steps"] == steady["matched_steps"] == 1 and steady["tokens"] > 0
    assert bare["source"].startswith("the SFT trainer's own batches") and bare["tokens"] == steady["matched_tokens"]
    ratio = report["sft_steady_vs_bare_ratio"]
    assert ratio == round(steady["matched_tokens_per_s"] / bare["tokens_per_s"], 4) > 0
    assert report["bars"]["sft_ratio_met"] == (ratio >= report["bars"]["sft_steady_vs_bare_ratio_min"])
    assert bare["trainable"] == ("every weight" if full_finetune else "the SFT stage's LoRA adapters")
    sft_trained = report["trained"]["sft"]
    assert (sft_trained["trainable_parameters"] == sum(sft_trained["parameter_dtypes"].values())) == full_finetune
    grpo = report["grpo"]["median_after_first"]
    assert report["grpo"]["steps"] == 2 and grpo["step_s"] >= grpo["generation_s"] > 0
    assert report["evaluation"]["episodes"] == 6 and report["evaluation"]["episodes_per_s"] > 0
    assert report["evaluation"]["generate_calls"] < report["evaluation"]["actions"]  # batched across episodes
    assert set(report["peak_memory_mb"]) >= {"sft", "grpo", "evaluation"} and report["packages"]["trl"]
    text = json.dumps(report)
    assert str(tmp_path) not in text and "/home/" not in text and "/root" not in text
    assert list(tmp_path.iterdir()) == []  # the scratch run is gone


def test_a_moved_run_gates_the_same_from_another_directory_and_ignores_a_decoy_at_the_old_path(
    done, tmp_path, monkeypatch
):
    import subprocess
    import sys

    from lib.gate import OUTCOME_CHECKS, run_gate

    config, run = done
    stage = json.loads((run.dir / "grpo" / "stage.json").read_text())
    assert stage["outputs"]["adapter"] == "./grpo/adapter"  # recorded relative to the run folder itself
    moved = tmp_path / "elsewhere" / "moved-run"
    shutil.copytree(run.dir, moved)
    before = {c["name"]: c["passed"] for c in run_gate(run.dir, write=False)["checks"]}
    # a decoy with the original's name where the run used to be, holding a different adapter
    decoy = tmp_path / "decoy"
    shutil.copytree(run.dir, decoy / run.dir.name)
    adapter = decoy / run.dir.name / "grpo" / "adapter" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:-8] + b"\x00" * 8)
    monkeypatch.chdir(decoy)
    after = {c["name"]: c["passed"] for c in run_gate(moved, write=False)["checks"]}
    assert after == before and all(passed for name, passed in after.items() if name not in OUTCOME_CHECKS)
    other = tmp_path / "cwd2"
    other.mkdir()
    cli = subprocess.run(
        [sys.executable, "-m", "lib", "gate", str(moved)],
        capture_output=True,
        text=True,
        cwd=other,
        env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert "[ok] grpo_artifact_ok" in cli.stdout and "[ok] postsave_from_saved_artifact" in cli.stdout, (
        cli.stdout + cli.stderr
    )


@pytest.mark.parametrize("damage", ["empty", "truncated", "no config", "stage dropped", "config edited"])
def test_a_damaged_manifest_fails_the_gate_and_is_a_clear_error_naming_the_file(done, tmp_path, damage):
    import subprocess
    import sys

    from lib.gate import run_gate
    from lib.runs import DamagedRunError, read_config

    config, run = done
    copy = tmp_path / "run"
    shutil.copytree(run.dir, copy)
    path = copy / "manifest.json"
    manifest = json.loads(path.read_text())
    if damage == "empty":
        path.write_text("")
    elif damage == "truncated":
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    elif damage == "no config":
        path.write_text(json.dumps({k: v for k, v in manifest.items() if k != "config"}))
    elif damage == "config edited":  # the manifest claims other settings than the stages ran with
        manifest["config"]["grpo"]["max_steps"] += 1
        path.write_text(json.dumps(manifest))
    else:
        manifest["stages"].pop("sft")
        path.write_text(json.dumps(manifest))
    verdict = run_gate(copy, write=False)
    manifest_check = next(c for c in verdict["checks"] if c["name"] == "manifest_valid")
    assert not manifest_check["passed"] and not verdict["integrity_passed"]
    assert str(path) in manifest_check["detail"] or damage == "stage dropped"
    if damage == "config edited":
        assert "grpo/stage.json ran with other settings" in manifest_check["detail"]
        assert "['grpo.max_steps']" in manifest_check["detail"]
    if damage not in ("stage dropped", "config edited"):
        with pytest.raises(DamagedRunError, match=str(path)):
            read_config(copy)
        cli = subprocess.run(
            [sys.executable, "-m", "lib", "quickcheck", "--run-dir", str(copy), "--episodes", "2"],
            capture_output=True,
            text=True,
        )
        assert cli.returncode == 2 and "DamagedRunError" in cli.stderr and str(path) in cli.stderr
        assert "Traceback" not in cli.stderr


def test_a_policy_loaded_for_play_goes_to_the_gpu_when_there_is_one(done, monkeypatch):
    """from_pretrained loads on the CPU and only the trainers move a model: the H100 bench of 2026-11-26 played its
    evaluation on the CPU (1.2 episodes/s, 64 MB of GPU memory). A loaded policy is sent to CUDA where CUDA exists,
    and stays where it is on a CPU-only machine."""
    import torch

    import lib.inference as inference

    config, run = done
    model_dir = run.read_stage("sft")["outputs"]["model"]
    moved = []
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *args, **kwargs: moved.append(args) or self)
    monkeypatch.setattr(inference, "cuda_available", lambda: False)
    inference.load_policy_model(model_dir, config.model)
    assert moved == []
    monkeypatch.setattr(inference, "cuda_available", lambda: True)
    model, _, _ = inference.load_policy_model(model_dir, config.model)
    assert moved == [("cuda",)] and not model.training


def test_sft_check_pairs_the_sft_model_with_its_teacher_and_the_chart_reads_it(done, tmp_path):
    from lib.evaluation.evaluate import gap_or_error, quick_check, sft_check
    from lib.evaluation.scripted import run_policy_episodes
    from lib.reporting.compare import imitation_chart, imitation_points

    config, run = done
    report = sft_check(config, run, episodes=4)
    written = json.loads((run.dir / "sft" / "check_holdout.json").read_text())
    assert written["sft-teacher"] == report["sft-teacher"] and written["episodes"] == 4
    sft, teacher = report["policies"]["sft"], report["policies"][config.spec.teacher]
    assert report["sft-teacher"]["n"] == sft["n"] == teacher["n"] == 4
    assert report["sft-teacher"]["mean"] == pytest.approx(sft["mean_return"] - teacher["mean_return"])
    # the oracle played the same seeds: the gap closure is (SFT - teacher) / (oracle - teacher) over their means
    oracle = run_policy_episodes(config.spec, config.spec.oracle, range(4), "holdout")[0]
    headroom = sum(e.episode_return for e in oracle) / 4 - teacher["mean_return"]
    assert report["oracle"] == config.spec.oracle and report["gap_closure"]["n"] == 4
    assert report["gap_closure"]["mean"] == pytest.approx(report["sft-teacher"]["mean"] / headroom)
    assert report["sft_seconds"] == run.read_stage("sft")["duration_s"] > 0
    assert 1 <= report["distinct_actions"] and 1 <= report["teacher_distinct_actions"]
    assert report["learner"] == {
        "model": "tiny",
        "lora_top_layers": None,
        "precision": "fp32",
        "labels": config.spec.teacher,
        "list_candidates": True,
        "turns": "state",
    }
    play = report["play"]  # what the SFT's play computed: one scored state a step
    assert play["states"] == pytest.approx(sft["mean_steps"] * 4, abs=0.05) and play["seconds"] >= 0
    assert 0 < play["computed_prompt_tokens"] <= play["prompt_tokens"]
    assert play["computed_per_state"] == round(play["computed_prompt_tokens"] / play["states"], 1)
    assert gap_or_error({0: 0.5}, {0: 0.4}, {0: 0.4}) == {  # no headroom: said, and the check still writes
        "error": "gap_closure: the oracle does not beat the teacher on these seeds"
    }
    [point] = imitation_points([run.dir])
    assert (point["env"], point["sft_minus_teacher"]) == (config.env, report["sft-teacher"]["mean"])
    assert point["learner"] == "tiny"
    assert len(imitation_chart([run.dir]).axes) == 1
    moved = Run(_copy(run, tmp_path), config)
    shutil.rmtree(moved.dir / "sft" / "model")
    with pytest.raises(FileNotFoundError, match="SFT model is not there"):
        sft_check(config, moved, episodes=2)
    with pytest.raises(FileNotFoundError, match="sft model is not there"):  # not a hub lookup of a local path
        quick_check(config, moved, episodes=2)
    assert {int(k) for k in report["sft_returns"]} == set(range(4))
    again = sft_check(config, run, episodes=4, vs=run.dir)  # paired with its own earlier check: the same episodes
    assert again["vs"]["sft-vs"] == {"mean": 0.0, "ci95": [0.0, 0.0], "n": 4}
    assert point["vs"] is None
    [point] = imitation_points([run.dir])  # the chart's points carry the paired difference (the capacity check's)
    assert point["vs"] == {"run": run.dir.name, "mean": 0.0, "ci95": [0.0, 0.0], "n": 4}
    bare = tmp_path / "no-check"
    (bare / "sft").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="sft-check"):
        imitation_points([bare])
    with pytest.raises(FileNotFoundError, match="no sft-check there"):
        sft_check(config, run, episodes=2, vs=bare)
    (bare / "sft" / "check_holdout.json").write_text(json.dumps({**written, "sft_seconds": None}))
    with pytest.raises(ValueError, match="duration_s"):
        imitation_points([bare])
    (bare / "sft" / "check_holdout.json").write_text(
        json.dumps({k: v for k, v in written.items() if k != "sft_returns"})
    )
    with pytest.raises(ValueError, match="per-seed returns"):
        sft_check(config, run, episodes=2, vs=bare)
    (bare / "sft" / "check_holdout.json").write_text(json.dumps({**written, "env": "json_tasks"}))
    with pytest.raises(ValueError, match="within one environment"):
        sft_check(config, run, episodes=2, vs=bare)


def test_a_quickcheck_of_the_grpo_model_alone_pairs_with_its_base_run(done, tmp_path):
    """`quickcheck --models grpo` plays the RL stage's model alone (a fork whose SFT its base already checked) and
    leaves out the differences that need the SFT; `compare --pairs` reads a split the evaluate stage did not play
    from a run's quickcheck: the same model on the same seeds pairs at zero."""
    from lib.evaluation.evaluate import quick_check
    from lib.reporting.compare import pair_table

    config, run = done
    base, fork = Run(_copy(run, tmp_path / "a"), config), Run(_copy(run, tmp_path / "b"), config)
    shutil.rmtree(fork.dir / "evaluate")
    with pytest.raises(ValueError, match="plays the run's grpo model"):
        quick_check(config, fork, episodes=3, models=("sft",))
    with pytest.raises(FileNotFoundError, match="has no quickcheck either"):
        pair_table([base.dir, fork.dir], splits=("holdout",))
    alone = quick_check(config, fork, episodes=3, models=("grpo",))
    assert "sft" not in alone["policies"] and set(alone["paired"]) == {"grpo-teacher"}
    both = quick_check(config, base, episodes=3)
    assert alone["returns"]["grpo"] == both["returns"]["grpo"] and set(both["paired"]) >= {"grpo-sft", "grpo-teacher"}
    shutil.rmtree(base.dir / "evaluate")
    table = pair_table([base.dir, fork.dir]).splitlines()  # holdout_novel: checked by neither, left out
    assert len(table) == 3 and "| holdout |" in table[2] and "| +0.000 [+0.000, +0.000] |" in table[2]
