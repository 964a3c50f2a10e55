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
