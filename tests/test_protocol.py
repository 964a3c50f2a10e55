"""The environment protocol: strict parsing, disjoint splits, the canonical action text."""

import pytest

from lib.envs.base import SEEDS_PER_SPLIT, Candidate, Invalid, format_action, parse_action, split_seed

CANDIDATES = (
    Candidate("a1", "gather", ("warfarin",), "gather evidence on warfarin"),
    Candidate("a2", "finish", (), "finish review"),
)


def test_canonical_action_parses_to_its_candidate():
    assert parse_action(format_action("a2"), CANDIDATES).candidate.kind == "finish"
    assert parse_action('  {"action":"a1"}\n', CANDIDATES).candidate.args == ("warfarin",)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "not a JSON object"),
        ("finish", "not a JSON object"),
        ('{"action": "a1"} {"action": "a2"}', "not a JSON object"),
        ('["a1"]', "not a JSON object"),
        ('{"action": "a9"}', "id not offered"),
        ('{"action": 1}', "'action' must be a string id"),
        ('{"action": ["a1", "a2"]}', "'action' must be a string id"),
        ('{"action": "a1", "reward": 1}', "object must have exactly one key, 'action'"),
        ('{"action": "a1", "action": "a2"}', "not a JSON object"),
        ('{"action": {"action": "a1"}}', "'action' must be a string id"),
        ('```json\n{"action": "a1"}\n```', "not a JSON object"),
        ("x" * 10_000, "too long"),
    ],
)
def test_everything_but_one_offered_id_is_invalid(text, reason):
    parsed = parse_action(text, CANDIDATES)
    assert isinstance(parsed, Invalid)
    assert parsed.reason == reason


def test_non_text_is_invalid():
    assert isinstance(parse_action(None, CANDIDATES), Invalid)
    assert isinstance(parse_action(b'{"action": "a1"}', CANDIDATES), Invalid)


def test_splits_own_disjoint_seed_blocks():
    train = {split_seed(s, "train") for s in range(1000)}
    holdout = {split_seed(s, "holdout") for s in range(1000)}
    novel = {split_seed(s, "holdout_novel") for s in range(1000)}
    assert not train & holdout and not train & novel and not holdout & novel


@pytest.mark.parametrize(
    "seed, split", [(-1, "train"), (SEEDS_PER_SPLIT, "train"), (1.5, "train"), (True, "train"), (0, "test")]
)
def test_bad_seed_or_split_is_a_clear_error(seed, split):
    with pytest.raises(ValueError, match="seed|split"):
        split_seed(seed, split)
