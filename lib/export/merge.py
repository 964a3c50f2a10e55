"""Stage `export`: merge the GRPO LoRA adapter into its base as a new folder, fingerprint every file, and prove
in a fresh process that the merged model answers like the unmerged adapter. Optional push to the hub.

`python -m lib stage export --run-dir outputs/<id>`; notebook 06_export runs it (`run_stage("export", ...)`).
Writes `export/merged/` (refuses to overwrite) and `export/export_manifest.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..episodes import teacher_states
from ..io import atomic_write_json
from ..merging import MergeError, MergeExistsError, compare_outputs, fp32, merge_adapter, model_outputs
from ..models import load_model, sha256_file, weights_sha256

# the merge and its check live one floor down, where the gate's rebuild of a committed run reads them too
ExportError, ExportExistsError = MergeError, MergeExistsError


def file_manifest(folder: Path) -> dict:
    """sha256 of every file in a folder, plus the weights sha used as `model_source`."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    return {"files": files, "weights_sha256": weights_sha256(folder)}


def check_prompts(config, n: int) -> list[list[dict]]:
    """Fixed prompts for the merge check: states at every position of the first held-out teacher episodes."""
    spec = config.spec
    env = spec.make_env()
    states = teacher_states(env, spec.make_policy(spec.teacher), range(n), "holdout")[:n]
    return [env.render(env.restore(seed, "holdout", history)) for seed, history in states]


def _start_fresh_process(run_dir: Path, model_dir: Path, prompts_path: Path, out: Path, log) -> subprocess.Popen:
    """Start loading `model_dir` in a new python process (nothing shared with this one) to compute its outputs into
    `out`; its console goes to `log` (a file, so a long log never blocks it while this process works)."""
    command = [
        sys.executable,
        "-m",
        "lib",
        "_model-outputs",
        "--run-dir",
        str(run_dir),
        "--model-dir",
        str(model_dir),
        "--prompts",
        str(prompts_path),
        "--out",
        str(out),
    ]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])


def _fresh_process_outputs(process: subprocess.Popen, log, model_dir: Path, out: Path) -> dict:
    """Wait for the fresh process and read its outputs, or an ExportError with the end of its console."""
    if process.wait() != 0:
        log.seek(0)
        raise ExportError(f"fresh-process reload of {model_dir} failed:\n{log.read().decode(errors='replace')[-2000:]}")
    return json.loads(out.read_text())


def push_to_hub(folder: Path, export_config) -> str:
    """Upload with huggingface_hub; the token comes from the environment only. Returns what happened."""
    if not export_config.push_to_hub:
        return "skipped: export.push_to_hub is false"
    if not export_config.hub_repo:
        return "skipped: export.hub_repo is not set"
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        return "skipped: no HF_TOKEN in the environment"
    from huggingface_hub import HfApi

    try:
        api = HfApi(token=token)
        api.create_repo(export_config.hub_repo, exist_ok=True, private=True)
        api.upload_folder(folder_path=str(folder), repo_id=export_config.hub_repo)
    except Exception as error:  # offline or refused: said plainly, never silent
        return f"skipped: hub unreachable or refused ({type(error).__name__}: {str(error)[:200]})"
    return f"pushed to https://huggingface.co/{export_config.hub_repo}"


def run_export(config, run) -> dict:
    from peft import PeftModel

    started = run.begin("export")
    grpo = run.read_stage("grpo")
    out = run.stage_dir("export")
    target = out / "merged"
    base_dir, adapter_dir = grpo["outputs"]["base_model"], Path(grpo["outputs"]["adapter"])
    if weights_sha256(adapter_dir) != grpo["metrics"]["adapter_sha256"]:
        raise ExportError(f"{adapter_dir} does not match the sha256 the grpo stage recorded; refusing to export it")
    with run.lap("export", "merge and save"):
        merge_adapter(base_dir, adapter_dir, target, fp32(config.model))
    with run.lap("export", "fingerprint"):
        manifest = {
            "source": {
                "base": base_dir,
                "adapter": str(adapter_dir),
                "adapter_sha256": grpo["metrics"]["adapter_sha256"],
            },
            **file_manifest(target),
        }

    prompts = check_prompts(config, config.export.check_prompts)
    prompts_path = out / "check_prompts.json"
    atomic_write_json(prompts_path, prompts)
    # the fresh process loads the merged folder while this one computes the unmerged adapter's outputs
    with tempfile.TemporaryFile() as log:
        with run.lap("export", "unmerged outputs, the fresh process beside"):
            fresh = _start_fresh_process(run.dir, target, prompts_path, out / "merged_outputs.json", log)
            try:
                model, tokenizer, _ = load_model(base_dir, fp32(config.model), trainable=False)
                unmerged = PeftModel.from_pretrained(model, str(adapter_dir)).eval()
                reference = model_outputs(unmerged, tokenizer, prompts, config.grpo.max_completion_length)
            except BaseException:
                fresh.kill()
                fresh.wait()
                raise
        with run.lap("export", "fresh process: merged outputs, the rest"):
            reloaded = _fresh_process_outputs(fresh, log, target, out / "merged_outputs.json")
    agreement = compare_outputs(reference, reloaded, config.export.logit_tolerance)
    manifest["check"] = agreement
    manifest["hub"] = push_to_hub(target, config.export)
    print(f"export hub: {manifest['hub']}")
    atomic_write_json(out / "export_manifest.json", manifest)
    if not agreement["agree"]:
        run.stage_done(
            "export",
            started=started,
            params=config.export.model_dump(),
            inputs={},
            outputs={"merged": str(target)},
            metrics=agreement,
            status="failed: merged model disagrees with the adapter",
        )
        raise ExportError(f"merged model disagrees with the unmerged adapter: {agreement}")
    return run.stage_done(
        "export",
        started=started,
        params=config.export.model_dump(),
        inputs={"base": base_dir, "adapter": str(adapter_dir)},
        outputs={"merged": str(target), "export_manifest.json": str(out / "export_manifest.json")},
        metrics={
            "weights_sha256": manifest["weights_sha256"],
            "files": len(manifest["files"]),
            **agreement,
            "hub": manifest["hub"],
        },
    )


def model_outputs_worker(run_dir: Path, model_dir: Path, prompts_path: Path, out: Path) -> None:
    """`python -m lib _model-outputs`: the fresh-process side of the merge check."""
    from ..runs import read_config

    config = read_config(run_dir)
    model, tokenizer, _ = load_model(model_dir, fp32(config.model), trainable=False)
    model.eval()
    prompts = json.loads(Path(prompts_path).read_text())
    atomic_write_json(out, model_outputs(model, tokenizer, prompts, config.grpo.max_completion_length))
