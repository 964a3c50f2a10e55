"""lib/reporting/plots.py on a small run folder built in tmp.

Fixture, not a real run: manifest.json records the cpu-smoke config (the run's environment), baselines.json
comes from `lib.baselines.run_baselines`, and eval.json / episodes.jsonl from real episodes of baseline policies
played by `lib.evaluation`, with baselines standing in under the model names untrained/sft/grpo. The training
logs, attack scores and post-save numbers are fixture values written in the format their stages write;
`training_rule_hits` is computed from the fixture GRPO log by `lib.antihack`.
"""

import json

import matplotlib

matplotlib.use("Agg")

import pytest

from lib.config import load_config
from lib.envs import get_spec
from lib.evaluation.antihack import training_rule_hits
from lib.evaluation.baselines import run_baselines
from lib.reporting import plots

STAND_INS = {"untrained": "random", "sft": "first_candidate", "grpo": "evidence_expert", "heuristic": "heuristic"}
PAIRS = (("grpo", "sft"), ("grpo", "teacher"), ("sft", "teacher"))  # eval.json names the teacher by its role
ROLES = {"teacher": "heuristic", "oracle": "oracle", "random": "random"}


def _write(path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in obj) if path.suffix == ".jsonl" else json.dumps(obj))


def _evaluation(resamples: int = 200):
    """eval.json and episodes.jsonl in the evaluate stage's format, from baseline policies' real episodes."""
    from lib.evaluation.closed_loop import episode_records, summarize
    from lib.evaluation.scripted import run_policy_episodes
    from lib.stats import paired_difference

    report, records = {"env": "polyguard", "roles": ROLES, "splits": {}, "ablations": {}}, []
    for split, seeds in (("holdout", range(8)), ("holdout_novel", range(8)), ("train", range(4))):
        summaries, returns = {}, {}
        for name, policy in STAND_INS.items():
            episodes, actions = run_policy_episodes(get_spec("polyguard"), policy, seeds, split)
            summaries[name] = {
                "kind": "baseline" if name == "heuristic" else "model",
                **summarize(episodes, actions, resamples),
            }
            returns[name] = {e.seed: e.episode_return for e in episodes}
            records += episode_records(name, episodes, actions)
        named = {**returns, "teacher": returns["heuristic"]}
        paired = {f"{a}-{b}": paired_difference(named[a], named[b], resamples=resamples) for a, b in PAIRS}
        report["splits"][split] = {"seeds": [seeds.start, seeds.stop], "policies": summaries, "paired": paired}
        if split == "holdout":
            episodes, actions = run_policy_episodes(get_spec("polyguard"), "oracle", range(4), split)
            report["ablations"]["sampled"] = {
                "policy": "grpo",
                "compared_with": "grpo greedy",
                **summarize(episodes, actions, resamples),
                "paired_vs_compared": paired_difference(
                    {e.seed: e.episode_return for e in episodes}, returns["grpo"], resamples=resamples
                ),
            }
            records += episode_records("grpo", episodes, actions, ablation="sampled")
    report["train_holdout_gap"] = {
        m: report["splits"]["train"]["policies"][m]["mean_return"]
        - report["splits"]["holdout"]["policies"][m]["mean_return"]
        for m in ("untrained", "sft", "grpo")
    }
    return report, records


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    _write(run / plots.MANIFEST, {"config": load_config("cpu-smoke", {"env": "polyguard"}).model_dump(mode="json")})
    spec = get_spec("polyguard")
    _write(run / plots.BASELINES, {s: run_baselines(spec, s, 20, 0) for s in ("holdout", "holdout_novel")})
    _write(
        run / plots.SFT_LOG,
        [{"step": s, "loss": 3.0 / s} for s in range(10, 60, 10)] + [{"step": 50, "train_loss": 1.0}],
    )
    grpo_log = [
        {
            "step": s,
            "reward": 0.1 * s,
            "reward_std": 0.2,
            "frac_reward_zero_std": 1 / s,
            "env/invalid_rate": 0.5 / s,
            "env/anti_cheat/loop": 0.1,
            "explore/beats_reference": 0.05 * s,
            "explore/best_minus_reference": 0.01 * s - 0.02,
            "explore/candidate_entropy": 1.0 / s,
            "explore/p_best": 0.02 * s,
        }
        for s in range(1, 6)
    ]
    _write(run / plots.GRPO_LOG, grpo_log)
    _write(
        run / plots.VALIDATION,
        [
            {"step": s, "n": 8, "mean_return": m, "ci95": [m - 0.1, m + 0.1], "invalid_rate": 0.0}
            for s, m in ((0, 0.5), (2, 0.6), (4, 0.55))
        ],
    )
    report, records = _evaluation()
    _write(run / plots.EVAL, report)
    _write(run / plots.EPISODES, records)
    attack = {
        "kind": "malformed",
        "states": 12,
        "mean_score": -0.1,
        "max_score": -0.1,
        "mean_worst_legal": 0.2,
        "max_margin_over_worst_legal": -0.1,
        "passed": True,
    }
    _write(
        run / plots.ANTI_HACKING,
        {
            "attacks": {"empty": attack, "second_pharmacist_review": {"states": 0, "passed": False}},
            "all_attacks_passed": False,
            "training_rule_hits": training_rule_hits(run / plots.GRPO_LOG),
        },
    )
    _write(
        run / plots.POSTSAVE,
        {
            "model_source": {"path": "fixture"},
            "validity_rate": 0.9,
            "mean_return": 0.4,
            "latency_s_p50": 0.02,
            "latency_s_p95": 0.05,
            "episodes": 3,
        },
    )
    return run


@pytest.mark.slow
def test_every_chart_draws_and_saves_a_png(run_dir):
    charts = plots.draw_all(run_dir)
    assert [c.name for c in charts] == list(plots.CHARTS)
    # an optional chart (the checkpoint sweep) is drawn only when its command has run; this fixture has not run it
    assert {c.name for c in charts if c.missing} == set(plots.OPTIONAL_CHARTS)
    for chart in (c for c in charts if c.name not in plots.OPTIONAL_CHARTS):
        assert chart.figure is not None and not chart.missing, chart.message
        assert chart.path == run_dir / "charts" / f"{chart.name}.png"
        assert chart.path.read_bytes().startswith(b"\x89PNG"), chart.name
        for ax in chart.figure.axes:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), (chart.name, ax.get_title())
    assert not [p for p in (run_dir / "charts").iterdir() if p.suffix != ".png"]  # no temp file left behind


def test_missing_input_is_not_drawn(tmp_path):
    _write(tmp_path / plots.EVAL, {"splits": {}})
    chart = plots.draw(tmp_path, "per_seed_deltas")
    assert chart.figure is None and chart.path is None and chart.missing == [plots.EPISODES]
    assert chart.message == f"chart 'per_seed_deltas' not drawn: missing {plots.EPISODES}"
    assert plots.show(tmp_path, "sft_loss") is None
    assert not (tmp_path / "charts").exists()


def test_a_chart_of_what_the_run_chose_not_to_measure_is_left_out_with_the_reason(tmp_path):
    """`eval.ablations: []` is a valid config: the evaluate stage must not fail on the ablations chart, and a chart
    left over from a fork's base is removed rather than shown as this run's."""
    _write(tmp_path / plots.EVAL, {"ablations": {}})
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "ablations.png").write_bytes(b"the base run's chart")
    chart = plots.draw(tmp_path, "ablations")
    assert chart.figure is None and chart.path is None and chart.missing == []
    assert chart.message == "chart 'ablations' not drawn: the run measured no ablations (eval.ablations is empty)"
    assert plots.show(tmp_path, "ablations") is None
    assert not (tmp_path / "charts" / "ablations.png").exists()
    # recorded but none measured (a model was not trained) is still an error naming them
    _write(tmp_path / plots.EVAL, {"ablations": {"no_sft": {"mean_return": None}}})
    with pytest.raises(ValueError, match=r"no measured ablations \(not measured: \['no_sft'\]\)"):
        plots.draw(tmp_path, "ablations")


def test_the_train_holdout_chart_of_a_run_that_left_out_a_split_says_so(run_dir, tmp_path):
    """`eval.splits: [holdout]` is a valid config: the train-vs-holdout chart is left out with the reason."""
    report = json.loads((run_dir / plots.EVAL).read_text())
    assert plots.draw(run_dir, "train_holdout_gap", save=False).figure is not None  # both splits: drawn
    report["splits"] = {"holdout": report["splits"]["holdout"]}
    _write(tmp_path / plots.EVAL, report)
    chart = plots.draw(tmp_path, "train_holdout_gap")
    assert chart.figure is None and chart.missing == []
    assert chart.message == (
        "chart 'train_holdout_gap' not drawn: train was not evaluated in this run (eval.splits: holdout)"
    )


def test_an_aggrevate_runs_rl_charts_are_its_loss_per_round_and_no_exploration(tmp_path):
    """`rl.algorithm: aggrevate` trains on the improver's labels: its train log has losses (tagged by round), no
    rewards and no samples. Its reward chart is the loss, a line per round; exploration is left out with the reason."""
    config = load_config("cpu-smoke", {"rl.algorithm": "aggrevate", "rl.validate_every": 0})
    _write(tmp_path / plots.MANIFEST, {"config": config.model_dump(mode="json")})
    log = [{"step": s, "loss": 1.0 / s, "round": r} for r in (1, 2) for s in range(1, 4)] + [{"step": 3, "round": 2}]
    _write(tmp_path / plots.GRPO_LOG, log)
    (ax,) = plots.draw(tmp_path, "grpo_reward").figure.axes
    assert "AggreVaTe" in ax.get_title() and [line.get_label() for line in ax.lines] == ["round 1", "round 2"]
    assert list(ax.lines[1].get_ydata()) == [1.0, 0.5, 1.0 / 3]
    chart = plots.draw(tmp_path, "exploration")
    assert chart.figure is None and "AggreVaTe" in chart.message and "samples nothing" in chart.message
    curve = [{"step": s, "round": r, "n": 4, "mean_return": m, "ci95": [m - 0.1, m + 0.1]} for r, s, m in
             ((0, 0, 0.5), (1, 6, 0.8), (2, 12, 0.75))]  # fmt: skip
    _write(tmp_path / plots.VALIDATION, curve)
    (ax,) = plots.draw(tmp_path, "validation_curve").figure.axes
    assert "AggreVaTe" in ax.get_title() and list(ax.lines[0].get_ydata()) == [0.5, 0.8, 0.75]
    assert [t.get_text() for t in ax.texts] == ["round 0", "round 1", "round 2"]


def test_input_without_what_the_chart_needs_raises(tmp_path):
    _write(tmp_path / plots.SFT_LOG, [{"step": 8, "train_loss": 6.2}])
    with pytest.raises(ValueError, match="loss"):
        plots.draw(tmp_path, "sft_loss")
    _write(tmp_path / plots.EVAL, {"splits": {"holdout": {}, "train": {}}})
    with pytest.raises(ValueError, match="eval.json"):
        plots.draw(tmp_path, "train_holdout_gap")
    assert not (tmp_path / "charts").exists()


def test_unknown_chart_name_raises_listing_the_names(tmp_path):
    with pytest.raises(ValueError, match="baseline_bars"):
        plots.draw(tmp_path, "no_such_chart")


def test_plotted_values_are_the_input_values(run_dir):
    """Bar heights are baselines.json's mean returns; the paired markers are eval.json's paired means."""
    reports = json.loads((run_dir / plots.BASELINES).read_text())
    heights = [bar.get_height() for bar in plots.draw(run_dir, "baseline_bars", save=False).figure.axes[0].patches]
    assert heights == [p["mean_return"] for r in reports.values() for p in r["policies"].values()]
    paired = json.loads((run_dir / plots.EVAL).read_text())["splits"]["holdout"]["paired"]
    ax = plots.draw(run_dir, "per_seed_deltas", save=False).figure.axes[0]
    marker = next(c for c in ax.collections if c.get_label().startswith("paired mean"))
    assert list(marker.get_offsets()[:, 1]) == [p["mean"] for p in paired.values()]
    exploration = plots.draw(run_dir, "exploration", save=False).figure.axes
    log = [json.loads(line) for line in (run_dir / plots.GRPO_LOG).read_text().splitlines()]
    assert list(exploration[0].lines[0].get_ydata()) == [r["explore/beats_reference"] for r in log]
    assert list(exploration[2].lines[0].get_ydata()) == [r["explore/candidate_entropy"] for r in log]
    assert list(exploration[3].lines[0].get_ydata()) == [r["explore/p_best"] for r in log]
    curve = plots.draw(run_dir, "validation_curve", save=False).figure.axes[0]
    validation = [json.loads(line) for line in (run_dir / plots.VALIDATION).read_text().splitlines()]
    assert list(curve.lines[0].get_ydata()) == [p["mean_return"] for p in validation]
    best = next(c for c in curve.collections if c.get_label() == "best")
    assert list(best.get_offsets()[0]) == [2, 0.6]  # the kept point is the best one
