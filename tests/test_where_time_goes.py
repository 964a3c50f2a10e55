"""The py-spy profile splitter puts each sample in the first bucket whose frames it contains, and sums seconds."""

import json

from lib.bench.where_time_goes import split_profile, table


def test_samples_go_to_the_first_matching_bucket(tmp_path):
    frames = [
        {"name": "main", "file": "lib/__main__.py"},
        {"name": "score_answers", "file": "lib/candidates.py"},
        {"name": "forward", "file": "transformers/models/qwen2/modeling_qwen2.py"},
        {"name": "_engine_run_backward", "file": "torch/autograd/graph.py"},
        {"name": "step", "file": "/checkout/lib/envs/polyguard/env.py"},
        {"name": "prompt_ids", "file": "lib/candidates.py"},
    ]
    samples = [[0, 1, 2], [0, 1], [0, 3], [0, 4], [0, 1, 5], [0]]
    profile = {"unit": "seconds", "samples": samples, "weights": [2.0, 1.0, 3.0, 0.5, 0.25, 1.0]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"shared": {"frames": frames}, "profiles": [profile]}))
    seconds = split_profile(path)
    assert seconds == {
        "candidate scoring: model forward": 2.0,
        "candidate scoring: Python": 1.0,
        "backward": 3.0,
        "environment": 0.5,
        "chat template and tokenisation": 0.25,  # inside scoring, but tokenising comes first
        "other Python": 1.0,
    }
    assert table(seconds).splitlines()[2] == "| backward | 3.0 | 39% |"


def test_each_stage_record_gives_its_own_peak_resident_memory(tmp_path):
    """`Run.begin` resets the process's memory peak, so a stage run after a larger one in the same process records
    its own peak, not the larger one's; a stage that never called begin says its peak is the process's."""
    import mmap

    from lib.config import load_config
    from lib.runs import Run, peak_rss_mb

    run = Run(tmp_path / "run", load_config("cpu-smoke"))
    started = run.begin("corpus")
    # 400 MiB mapped straight from the kernel and touched: an allocator could hand back pages the process already
    # holds (its RSS would not move), an anonymous map cannot, and closing it returns them.
    big = mmap.mmap(-1, 400 * 1024 * 1024)
    big.write(b"\x01" * len(big))
    large = run.stage_done("corpus", started=started, params={}, inputs={}, outputs={}, metrics={})
    big.close()
    started = run.begin("sft")
    small = run.stage_done("sft", started=started, params={}, inputs={}, outputs={}, metrics={})
    unscoped = run.stage_done("export", started=started, params={}, inputs={}, outputs={}, metrics={})
    assert large["peak_rss_scope"] == small["peak_rss_scope"] == "stage"  # Linux, as CI
    assert large["peak_rss_mb"] >= small["peak_rss_mb"] + 350
    assert 0 < small["peak_rss_mb"] <= peak_rss_mb()
    assert unscoped["peak_rss_scope"] == "process"
    on_disk = json.loads((tmp_path / "run" / "corpus" / "stage.json").read_text())
    assert on_disk["peak_rss_mb"] == large["peak_rss_mb"]
    from lib.reporting.logs import RUN_ROW, run_rows

    rows = {row["stage"]: row for row in run_rows(tmp_path / "run")}  # `python -m lib logs` shows them
    assert rows["corpus"]["peak_rss_mb"] == large["peak_rss_mb"] and rows["sft"]["peak_rss_mb"] == small["peak_rss_mb"]
    assert rows[RUN_ROW]["peak_rss_mb"] == max(r["peak_rss_mb"] for r in (large, small, unscoped))


def test_each_lap_records_its_own_peak_and_the_stage_keeps_the_highest(tmp_path):
    """A lap resets the memory peak, so each part of a stage says what it held (`laps_peak_rss_mb`); the stage's
    `peak_rss_mb` is still the highest over all its parts, a large lap's included after a smaller one followed."""
    import mmap

    from lib.config import load_config
    from lib.runs import Run

    run = Run(tmp_path / "run", load_config("cpu-smoke"))
    started = run.begin("grpo")
    with run.lap("grpo", "play"):
        big = mmap.mmap(-1, 400 * 1024 * 1024)  # from the kernel, touched (see the test above)
        big.write(b"\x01" * len(big))
        big.close()
    with run.lap("grpo", "train"):
        pass
    record = run.stage_done("grpo", started=started, params={}, inputs={}, outputs={}, metrics={})
    laps = record["laps_peak_rss_mb"]
    assert set(laps) == {"play", "train"} == set(record["laps_s"])
    assert laps["play"] >= laps["train"] + 350
    assert record["peak_rss_mb"] >= laps["play"]


def test_a_lap_after_a_large_freed_heap_records_only_its_own_peak(tmp_path):
    """Freed small objects stay in the allocator's heap, resident; a lap hands them back before it resets the peak,
    so a lap after a large one does not carry the large one's memory as its own."""
    from lib.config import load_config
    from lib.runs import Run

    run = Run(tmp_path / "run", load_config("cpu-smoke"))
    started = run.begin("grpo")
    with run.lap("grpo", "play"):
        held = [bytearray(b"\x01" * 4096) for _ in range(100_000)]  # about 400 MB in heap-sized pieces
        kept = held[::64]  # a few stay alive among them, so the heap cannot shrink from its top alone
        del held
    with run.lap("grpo", "train"):
        pass
    laps = run.stage_done("grpo", started=started, params={}, inputs={}, outputs={}, metrics={})["laps_peak_rss_mb"]
    assert laps["train"] <= laps["play"] - 300 and len(kept) == 1_563


def test_each_run_records_the_size_of_onednn_s_kernel_cache_where_one_was_set(monkeypatch):
    """oneDNN's per-shape kernel cache held SmolLM2's SFT memory growing (docs/GUIDE.md); a run made with it sized
    says so in its hardware record."""
    from lib.runs import hardware

    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert hardware()["onednn_primitive_cache"] is None
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")
    assert hardware()["onednn_primitive_cache"] == "0"
