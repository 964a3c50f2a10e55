"""The RL policy against every scripted policy (lib/evaluation/evaluate.py): eval.json pairs it by seed with each,
says per held-out split which it beats (paired 95% CI above zero) and which it does not, the oracle aside; the
report's headline names them, and the gate refuses an eval.json whose verdict its own pairs do not support."""

import json

import pytest

from lib.evaluation.evaluate import _paired, baselines_beaten
from lib.gate import GateFailure, _claim_honest
from lib.reporting.report import headline

ROLE = {"teacher": "heuristic", "oracle": "oracle", "improver": "improver", "random": "random"}


def _split(ci_by_pair: dict[str, tuple[float, float]]) -> dict:
    kinds = {"sft": "model", "grpo": "model", "heuristic": "baseline", "oracle": "baseline", "random": "baseline"}
    kinds |= {"evidence_expert": "baseline", "always_finish": "trivial", "improver": "reference"}
    return {
        "policies": {n: {"kind": k, "n": 4, "mean_return": 0.5, "ci95": [0.4, 0.6]} for n, k in kinds.items()},
        "paired": {key: {"mean": sum(ci) / 2, "ci95": list(ci), "n": 4} for key, ci in ci_by_pair.items()},
    }


PAIRS = {
    "grpo-sft": (0.1, 0.3),
    "grpo-teacher": (0.05, 0.2),
    "sft-teacher": (-0.02, 0.01),
    "grpo-random": (0.3, 0.5),
    "grpo-evidence_expert": (-0.08, -0.01),
    "grpo-always_finish": (0.4, 0.6),
    "grpo-oracle": (-0.2, -0.1),
}


def _report(novel_expert=(-0.08, -0.01)) -> dict:
    splits = {"holdout": _split(PAIRS), "holdout_novel": _split({**PAIRS, "grpo-evidence_expert": novel_expert})}
    splits["train"] = _split(PAIRS)
    baselines = baselines_beaten(splits, ROLE)
    return {
        "env": "polyguard",
        "roles": ROLE,
        "splits": splits,
        "improved": True,
        "beats_teacher": True,
        "baselines": baselines,
        "beats_every_baseline": not any(v["does_not_beat"] for v in baselines.values()),
    }


def test_the_rl_policy_is_paired_with_every_scripted_policy_and_the_teacher_once():
    returns = {name: {0: 0.1 * i, 1: 0.2, 2: 0.3} for i, name in enumerate(["grpo", "sft", "heuristic", "random"])}
    pairs = _paired(returns, ROLE, 200, ["random", "heuristic", "oracle"])
    assert set(pairs) == {"grpo-sft", "grpo-teacher", "sft-teacher", "grpo-random"}  # no oracle returns: no pair
    assert "grpo-heuristic" not in pairs  # the teacher's pair is named by its role


def test_the_verdict_lists_who_is_beaten_on_each_held_out_split_leaving_out_the_oracle_and_train():
    report = _report()
    assert set(report["baselines"]) == {"holdout", "holdout_novel"}
    for split in report["baselines"].values():
        assert split == {"beats": ["heuristic", "random", "always_finish"], "does_not_beat": ["evidence_expert"]}
    assert not report["beats_every_baseline"]
    said = headline(report, "RL (AggreVaTe)")
    assert "it does not beat `evidence_expert`" in said and "**does not beat every baseline**" in said
    assert "oracle" not in said.split("Against the scripted policies")[1]


def test_a_split_where_the_expert_is_not_beaten_keeps_the_verdict_false():
    report = _report(novel_expert=(0.01, 0.05))
    assert report["baselines"]["holdout_novel"]["does_not_beat"] == []
    assert report["baselines"]["holdout"]["does_not_beat"] == ["evidence_expert"]
    assert not report["beats_every_baseline"]
    won = _report(novel_expert=(0.01, 0.05))
    won["splits"]["holdout"]["paired"]["grpo-evidence_expert"]["ci95"] = [0.001, 0.02]
    won["baselines"] = baselines_beaten(won["splits"], ROLE)
    assert all(v["does_not_beat"] == [] for v in won["baselines"].values())


def test_the_gate_refuses_a_baseline_verdict_its_pairs_do_not_support(tmp_path):
    (tmp_path / "evaluate").mkdir()
    report = _report()
    (tmp_path / "evaluate" / "eval.json").write_text(json.dumps(report))
    assert "beats_every_baseline=False matches the scripted pairs (not beaten: ['evidence_expert'])" in _claim_honest(
        tmp_path
    )
    for tamper in ("flag", "list"):
        bad = _report()
        if tamper == "flag":
            bad["beats_every_baseline"] = True
        else:
            bad["baselines"]["holdout"] = {
                "beats": ["heuristic", "random", "always_finish", "evidence_expert"],
                "does_not_beat": [],
            }
        (tmp_path / "evaluate" / "eval.json").write_text(json.dumps(bad))
        with pytest.raises(GateFailure, match="beats_every_baseline" if tamper == "flag" else "baselines"):
            _claim_honest(tmp_path)


def test_a_run_from_before_the_baseline_pairs_still_gates_and_reads(tmp_path):
    old = _report()
    for key in ("baselines", "beats_every_baseline"):
        del old[key]
    assert "Against the scripted policies" not in headline(old, "RL (GRPO)")
    (tmp_path / "evaluate").mkdir()
    (tmp_path / "evaluate" / "eval.json").write_text(json.dumps(old))
    said = _claim_honest(tmp_path)
    assert "beats_teacher=True matches" in said and "beats_every_baseline" not in said
