"""Every environment's behaviour, pinned: `python -m lib fingerprint` hashes the returns, rendered prompts and step
records of every scripted policy; tests/env_fingerprints.json holds the hashes of the current behaviour. A change to
an environment that was meant to change nothing (a refactor) must keep them; one that was meant to change behaviour
regenerates the file (the command is in the failure message) and says so in its commit."""

import json
from pathlib import Path

import pytest

from lib.bench.fingerprint import fingerprint

PINNED = Path(__file__).with_name("env_fingerprints.json")
REGENERATE = (
    "python -m lib fingerprint --env polyguard sentinel_trust sentinel_cluster json_tasks tests.toyenv --episodes 20 "
    "--out tests/env_fingerprints.json"
)


@pytest.mark.parametrize("pinned", json.loads(PINNED.read_text()), ids=lambda p: p["env"])
def test_every_environment_behaves_as_pinned(pinned):
    now = fingerprint(pinned["env"], pinned["seeds_per_split"], tuple(pinned["splits"]))
    assert (now["episodes"], now["steps"], now["sha256"]) == (pinned["episodes"], pinned["steps"], pinned["sha256"]), (
        f"{pinned['env']} behaves differently; if that was intended, regenerate: {REGENERATE}"
    )


def test_the_fingerprint_is_deterministic_and_sees_a_changed_weight(monkeypatch):
    from tests.toyenv import ToyEnv

    before = fingerprint("tests.toyenv", 5, ("holdout",))
    assert fingerprint("tests.toyenv", 5, ("holdout",))["sha256"] == before["sha256"]
    monkeypatch.setattr(ToyEnv, "weights", {"correct": 0.9, "anti_cheat": 1.0})
    after = fingerprint("tests.toyenv", 5, ("holdout",))
    assert after["sha256"]["returns"] != before["sha256"]["returns"]
    assert after["sha256"]["prompts"] == before["sha256"]["prompts"]  # the prompts do not show the weights
