"""Lab probe (docs/lab/memory/play.json): a run's RL policy plays held-out episodes with the episode cache, at a
bound on a scoring pass's key/value columns (`lib.candidates.PASS_COLUMNS`) and a count of episodes in lockstep
(`eval.batch_size`): wall time, peak resident memory, prompt tokens computed a state, and the cache's own counts
(states lent a cache, states whose cache was over `model.episode_cache_mb`).

    python docs/lab/memory/play_probe.py RUN_DIR COLUMNS BATCH EPISODES [SPLIT]
"""

import json
import sys
from collections import Counter
from pathlib import Path

from lib import candidates, episode_cache
from lib.bench.bench_tokens import _play
from lib.config import override_config
from lib.evaluation.closed_loop import model_artifacts, split_seeds
from lib.inference import load_policy_model
from lib.io import atomic_write_json
from lib.provenance import hardware
from lib.runs import Run, read_config

run_dir, columns, batch, episodes = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
split = sys.argv[5] if len(sys.argv) > 5 else "holdout"
candidates.PASS_COLUMNS["cpu"] = columns
stats: Counter = Counter()


class Counted(episode_cache.EpisodeCache):
    def __init__(self, budget_mb):
        super().__init__(budget_mb)
        self.stats = stats


episode_cache.EpisodeCache = Counted
recorded = read_config(run_dir)  # the run folder opens with the config it was made with; play uses the override
config = override_config(recorded, {"eval.batch_size": batch}, "play probe")
entry = model_artifacts(recorded, Run(run_dir, recorded))["grpo"]
loaded = load_policy_model(entry["model"], config.model, entry["adapter"])
arm = _play(config, loaded, split_seeds(config, split)[:episodes], split, f"columns {columns}, batch {batch}")
record = {k: v for k, v in arm.items() if not k.startswith("_")}
record.update(run=run_dir.name, columns=columns, batch=batch, split=split, cache=dict(stats), cpu=hardware().get("cpu"))
record["episode_returns"] = {str(seed): ret for seed, (ret, _) in arm["_episodes"].items()}
print(json.dumps({k: v for k, v in record.items() if k != "episode_returns"}))
out = Path(__file__).with_name("play.json")
rows = json.loads(out.read_text()) if out.exists() else []
atomic_write_json(out, rows + [record])
