"""A run committed without its merged folders gates the same: `python -m lib gate` rebuilds sft/model and
export/merged from the adapters the run keeps (lib/merging.py) and checks each rebuild, by sha where the bits are
the same, else by the merged model's outputs against the recorded ones. A rebuild it cannot check fails."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from lib.gate import OUTCOME_CHECKS, run_gate
from lib.merging import REBUILT, rebuild_missing
from tests import micro

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # trains a micro run

MICRO = {**micro.MICRO, **micro.MICRO_EVAL, "eval.ablations": [], "model.sft_full_finetune": False}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A micro run whose SFT trains an adapter (as SmolLM2's does), through export and post-save."""
    return micro.finished_run(MICRO, tmp_path_factory.mktemp("outputs") / "run", ["random", "heuristic", "oracle"])[1]


def _slimmed(run, tmp_path):
    """A copy as it would be committed: no merged folders, the corpus files and episodes gzipped."""
    copy = tmp_path / "committed"
    shutil.copytree(run.dir, copy)
    shutil.rmtree(copy / "sft" / "model")
    shutil.rmtree(copy / "export" / "merged")
    for name in ("corpus/sft.jsonl", "corpus/grpo_prompts.jsonl", "evaluate/episodes.jsonl"):
        path = copy / name
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    return copy


def _failed(verdict) -> dict:
    return {c["name"]: c["detail"] for c in verdict["checks"] if not c["passed"] and c["name"] not in OUTCOME_CHECKS}


def test_the_sft_stage_keeps_the_adapter_its_merged_model_is_made_of(finished):
    record = json.loads((finished.dir / "sft" / "stage.json").read_text())
    assert record["outputs"]["adapter"] == "./sft/adapter"
    assert (finished.dir / "sft" / "adapter" / "adapter_model.safetensors").is_file()
    assert len(record["metrics"]["adapter_sha256"]) == 64


def test_a_run_without_its_merged_folders_gates_after_rebuilding_them_bit_identical(finished, tmp_path):
    before = run_gate(finished.dir, write=False)
    copy = _slimmed(finished, tmp_path)
    verdict = run_gate(copy, write=False)
    assert not _failed(verdict), verdict
    assert [c["passed"] for c in verdict["checks"]] == [c["passed"] for c in before["checks"]]
    postsave = next(c["detail"] for c in verdict["checks"] if c["name"] == "postsave_from_saved_artifact")
    assert postsave.startswith("rebuilt from the run's adapters, bit-identical")
    for folder in ("sft/model", "export/merged"):
        note = json.loads((copy / folder / REBUILT).read_text())
        assert note["identical"] and note["sha256"] == note["recorded_sha256"], note


def test_a_rebuild_with_other_bits_passes_only_within_the_recorded_outputs_tolerance(finished, tmp_path):
    """Another CPU's float arithmetic gives other bits: simulated by records naming another sha. The rebuilt model
    is then held to the export stage's recorded outputs, and fails when they are not its own."""
    copy = _slimmed(finished, tmp_path)
    fake = "0" * 64
    for name, keys in (("export/export_manifest.json", ["weights_sha256"]), ("postsave/postsave_inference.json", [])):
        data = json.loads((copy / name).read_text())
        if keys:
            data["weights_sha256"] = fake
        else:
            data["model_source"]["sha256"] = fake
        (copy / name).write_text(json.dumps(data))
    verdict = run_gate(copy, write=False)
    assert not _failed(verdict), verdict
    postsave = next(c["detail"] for c in verdict["checks"] if c["name"] == "postsave_from_saved_artifact")
    assert "differs from the recorded 000000000000" in postsave and "greedy texts equal" in postsave

    shutil.rmtree(copy / "export" / "merged")
    outputs = json.loads((copy / "export" / "merged_outputs.json").read_text())
    outputs["logits"] = [[value + 1.0 for value in row] for row in outputs["logits"]]
    (copy / "export" / "merged_outputs.json").write_text(json.dumps(outputs))
    failed = _failed(run_gate(copy, write=False))
    assert set(failed) == {"postsave_from_saved_artifact"}
    assert "do not agree with the recorded ones within tolerance" in failed["postsave_from_saved_artifact"]


def test_sft_model_is_rebuilt_in_the_precision_its_stage_recorded_not_the_one_this_machine_resolves(finished, tmp_path):
    """A bf16 run gated on a CPU without bf16 instructions (where `auto` means fp32) must merge in bf16, as its SFT
    stage did: simulated by a record naming bf16 for a run whose config says fp32. The rebuild follows the record."""
    from safetensors import safe_open

    copy = _slimmed(finished, tmp_path)
    path = copy / "sft" / "stage.json"
    record = json.loads(path.read_text())
    assert (
        record["metrics"]["precision"]
        == "fp32"
        == json.loads((copy / "manifest.json").read_text())["config"]["model"]["precision"]
    )
    record["metrics"]["precision"] = "bf16"
    path.write_text(json.dumps(record))
    made = rebuild_missing(copy)["sft/model"]
    assert made["precision"] == "bf16" and not made["identical"]
    (weights,) = (copy / "sft" / "model").glob("*.safetensors")
    with safe_open(str(weights), "pt") as tensors:
        assert {str(tensors.get_tensor(key).dtype) for key in tensors.keys()} == {"torch.bfloat16"}


def test_a_merged_folder_that_cannot_be_rebuilt_fails_the_gate_naming_what_is_missing(finished, tmp_path):
    copy = _slimmed(finished, tmp_path)
    shutil.rmtree(copy / "sft" / "adapter")
    failed = _failed(run_gate(copy, write=False))
    assert "postsave_from_saved_artifact" in failed
    assert "cannot be rebuilt: no adapter at" in failed["postsave_from_saved_artifact"]
    assert not (copy / "sft" / "model").exists() and not (copy / "export" / "merged").exists()


def test_rebuild_leaves_a_complete_run_alone(finished):
    assert rebuild_missing(finished.dir) == {}


def test_slim_makes_a_committable_run_that_gates_and_refuses_what_it_could_not_rebuild(finished, tmp_path):
    import subprocess
    import sys

    from lib.export.slim import SlimError, slim_run

    tampered = tmp_path / "tampered"
    shutil.copytree(finished.dir, tampered)
    weights = tampered / "grpo" / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00" * 4)
    with pytest.raises(SlimError, match="not the adapter its stage recorded"):
        slim_run(tampered)
    assert (tampered / "sft" / "model").is_dir() and (tampered / "export" / "merged").is_dir()  # nothing changed

    copy = tmp_path / "slim"
    shutil.copytree(finished.dir, copy)
    (copy / "notes.md").write_text(f"made in {Path.home()}/x and {REPO}/outputs/run\n")
    cli = subprocess.run([sys.executable, "-m", "lib", "slim", str(copy)], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    record = json.loads((copy / "slim.json").read_text())
    assert {"sft/model", "export/merged"} <= set(record["removed"])
    assert not (copy / "sft" / "model").exists() and not (copy / "export" / "merged").exists()
    assert (copy / "notes.md").read_text() == "made in ~/x and outputs/run\n"
    verdict = run_gate(copy, write=False)
    assert not _failed(verdict), verdict
    # slimmed again after the gate rebuilt the merged folders: the record keeps what the first slim did
    assert (copy / "export" / "merged").is_dir()
    slim_run(copy)
    twice = json.loads((copy / "slim.json").read_text())
    assert twice["paths_replaced_in"] == record["paths_replaced_in"] and "notes.md" in twice["paths_replaced_in"]
    assert set(twice["removed"]) == set(record["removed"]) and not (copy / "export" / "merged").exists()
    again = subprocess.run([sys.executable, "-m", "lib", "slim", str(tmp_path / "nowhere")], capture_output=True)
    assert again.returncode == 2 and b"not a run folder" in again.stderr
