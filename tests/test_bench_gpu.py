"""The one GPU benchmark's parts that need no training: the random-weight model it can train instead of the profile's
(built without the hub), and `--modes`, which runs the benchmark once per Unsloth mode, each in a fresh process.
The benchmark itself runs on the tiny model in tests/test_evaluate.py (slow)."""

import json
import subprocess

from transformers import AutoModelForCausalLM, AutoTokenizer

from lib.__main__ import main
from lib.bench import gpu_modes
from lib.bench.random_model import SHAPES, build_random_model

ROWS = [
    {
        "prompt": [{"role": "user", "content": f"Patient {i}: regimen warfarin {i} mg, eGFR {40 + i}"}],
        "completion": [{"role": "assistant", "content": f'{{"action": "reduce_{i}"}}'}],
    }
    for i in range(6)
]


def test_a_random_model_of_a_shape_is_a_normal_folder_and_its_record_names_no_path(tmp_path):
    folder = tmp_path / "random-model"
    record = build_random_model("small", ROWS, "warfarin reduce finish", folder, "fp32")
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.hidden_size == SHAPES["small"]["hidden_size"] == record["shape"]["hidden_size"]
    assert model.config.vocab_size == SHAPES["small"]["vocab_size"] >= len(tokenizer) == record["tokenizer_len"]
    assert record["parameters"] == sum(p.numel() for p in model.parameters())
    assert record["sft_prompt_tokens_max"] >= record["sft_prompt_tokens_mean"] > 0
    assert str(tmp_path) not in json.dumps(record)
    assert SHAPES["qwen2.5-0.5b"]["num_hidden_layers"] == 24 and SHAPES["qwen2.5-0.5b"]["vocab_size"] == 151936


def test_modes_each_run_the_benchmark_in_a_fresh_process_and_auto_needs_unsloth(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_modes, "unsloth_probe", lambda env: {"importable": False, "error": "no module unsloth"})
    commands, real_run = [], subprocess.run

    def fresh_process(command, **kwargs):
        if "bench-gpu" not in command:
            return real_run(command, **kwargs)  # git, for the source's commit
        commands.append(command)
        out = command[command.index("--out") + 1]
        with open(out, "w") as handle:
            json.dump({"backend": "trl_transformers"}, handle)
        return subprocess.CompletedProcess(command, 0, stdout="child console\n")

    monkeypatch.setattr(gpu_modes.subprocess, "run", fresh_process)
    log = tmp_path / "modes.log"
    argv = ["--profile", "cpu-smoke", "--sft-steps", "2", "--set", "grpo.batch_size=8"]
    result = gpu_modes.run_modes(["auto", "never"], argv, log)
    assert "no module unsloth" in result["modes"]["auto"]["skipped"]
    never = result["modes"]["never"]
    assert never["rc"] == 0 and never["report"] == {"backend": "trl_transformers"} and "error_tail" not in never
    (command,) = commands
    assert command[1:4] == ["-m", "lib", "bench-gpu"]
    assert command[4 : 4 + len(argv)] == argv and command[4 + len(argv)] == "model.use_unsloth=never"
    assert "model.use_unsloth=never" in log.read_text() and "child console" in log.read_text()
    assert set(result["source"]) >= {"sha", "how"} and str(tmp_path) not in json.dumps(result)


def test_bench_gpu_with_modes_writes_one_json_and_fails_when_a_mode_fails(tmp_path, monkeypatch, capsys):
    outcomes = {"auto": {"skipped": "import unsloth failed: no module"}, "never": {"rc": 1, "error_tail": ["boom"]}}
    seen = []

    def run_modes(modes, argv, log_path):
        seen.append((modes, argv, log_path))
        return {"modes_requested": modes, "modes": {m: outcomes[m] for m in modes}}

    monkeypatch.setattr(gpu_modes, "run_modes", run_modes)
    out = tmp_path / "modes.json"
    assert main(["bench-gpu", "--modes", "auto", "--out", str(out), "--random-model", "small"]) == 0
    assert json.loads(out.read_text())["modes"]["auto"] == outcomes["auto"]
    assert "auto: skipped: import unsloth failed" in capsys.readouterr().out
    modes, argv, _ = seen[0]
    assert modes == ["auto"] and argv[argv.index("--random-model") + 1] == "small" and argv[-1] == "--set"
    assert main(["bench-gpu", "--modes", "never", "--out", str(out), "--set", "grpo.max_steps=3"]) == 1
    assert "never: FAILED (exit 1):\nboom" in capsys.readouterr().out
    assert seen[1][1][-2:] == ["--set", "grpo.max_steps=3"]


def test_the_op_table_reads_the_time_of_the_device_it_ran_on(monkeypatch):
    """torch 2.x names a GPU op's own time `self_device_time_total`; the H100 bench of 2026-11-26 read the old
    `self_cuda_time_total`, which is gone, and every row of its tables said 0.0 ms."""
    from types import SimpleNamespace

    from lib.bench import recorders

    events = [
        SimpleNamespace(key="mm", count=3, self_cpu_time_total=1000.0, self_device_time_total=9000.0),
        SimpleNamespace(key="add", count=5, self_cpu_time_total=4000.0, self_device_time_total=2000.0),
    ]
    prof = SimpleNamespace(key_averages=lambda: events)
    monkeypatch.setattr(recorders, "cuda_available", lambda: True)
    assert recorders.top_ops(prof) == [
        {"op": "mm", "calls": 3, "self_cuda_ms": 9.0},
        {"op": "add", "calls": 5, "self_cuda_ms": 2.0},
    ]
    monkeypatch.setattr(recorders, "cuda_available", lambda: False)
    assert [row["op"] for row in recorders.top_ops(prof)] == ["add", "mm"]
    assert recorders.top_ops(prof)[0]["self_cpu_ms"] == 4.0


def _train(recorder, steps):
    """Play the Trainer's callbacks around `steps` (each a list of (input ids, mask) forwards) on a backbone that
    has what ShapeRecorder hooks into (`embed_tokens`, `layers`)."""
    from types import SimpleNamespace

    import torch

    class Backbone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens, self.layers = torch.nn.Embedding(10, 2), torch.nn.ModuleList()

        def forward(self, input_ids=None, attention_mask=None):
            return self.embed_tokens(input_ids)

    model = Backbone()
    recorder.on_train_begin(SimpleNamespace(gradient_checkpointing=False), None, None, model=model)
    state = SimpleNamespace(global_step=0)
    for forwards in steps:
        recorder.on_step_begin(None, state, None)
        for ids, mask in forwards:
            model(input_ids=ids, attention_mask=mask)
        state.global_step += 1  # as the Trainer does, before on_step_end
        recorder.on_step_end(None, state, None)
    recorder.on_train_end(None, None, None)
    return recorder


def test_the_sft_recorder_times_only_steady_steps_and_keeps_their_batches_for_the_bare_loop():
    """Warm-up steps and profiled steps are not timed; each timed step counts the real tokens its forwards fed, and
    the batches of the first timed steps are kept (on their device) for the bare loop to replay."""
    import torch

    from lib.bench.recorders import ShapeRecorder

    mask = torch.ones(2, 3, dtype=torch.long)
    mask[1, 2] = 0  # one pad: 5 real tokens a forward
    steps = [[(torch.full((2, 3), step), mask)] for step in range(6)]
    recorder = _train(ShapeRecorder(profile_steps=(3, 4), warmup_steps=1, keep_batches=2), steps)
    # steps 1, 2, 4 and 5 timed (0 warms up, 3 is profiled); two batches kept, steps 1 and 2's
    assert [tokens for _, tokens in recorder.steady] == [5, 5, 5, 5]
    assert [int(ids[0, 0]) for ids, _ in recorder.batches] == [1, 2]
    steady = recorder.steady_state()
    assert steady["steps"] == 4 and steady["tokens"] == 20 and steady["tokens_per_s"] > 0
    assert steady["matched_steps"] == 2 and steady["matched_tokens"] == 10  # the steps whose batches were kept
    assert recorder.summary()["forwards"] == 6 and recorder.summary()["padding_share"] == round(1 / 6, 4)
    assert recorder.ops  # step 3's profiler table


def test_with_several_forwards_a_step_only_steps_whose_every_batch_was_kept_are_matched():
    import torch

    from lib.bench.recorders import ShapeRecorder

    ones = torch.ones(1, 4, dtype=torch.long)
    # gradient accumulation: two forwards a step
    steps = [[(torch.full((1, 4), 2 * step + micro), ones) for micro in range(2)] for step in range(3)]
    recorder = _train(ShapeRecorder(profile_steps=(9, 9), warmup_steps=1, keep_batches=3), steps)
    # forwards 2-3 (step 1) and 4 (half of step 2) were kept: only step 1 is matched, its two batches replayed
    assert [int(ids[0, 0]) for ids, _ in recorder.batches] == [2, 3]
    steady = recorder.steady_state()
    assert steady["steps"] == 2 and steady["tokens"] == 16 and steady["matched_steps"] == 1
    assert steady["matched_tokens"] == 8
