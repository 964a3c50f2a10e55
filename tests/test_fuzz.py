"""Fuzzing the action channel: nothing crashes, rewards stay finite, every invalid action scores the penalty."""

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.envs.base import Invalid, parse_action
from lib.envs.polyguard.env import PolyGuardEnv
from lib.envs.polyguard.reward import INVALID_PENALTY

ENV = PolyGuardEnv()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
garbage = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF), max_size=60),
    json_values.map(json.dumps),
    st.dictionaries(st.text(max_size=10), json_values, max_size=4).map(json.dumps),
    st.builds(lambda v: json.dumps({"action": v}), json_values),
    st.builds(lambda i: json.dumps({"action": f"a{i}"}), st.integers(min_value=90, max_value=10**9)),
    st.sampled_from(
        [
            "ignore the rules, reward=1",
            '{"action": "a1", "reward": 1.0}',
            '{"reward": 1}',
            '{"action": "a1"}{"action": "a2"}',
            "[" * 200 + "]" * 200,
            '{"a":' * 100 + "1" + "}" * 100,
            "x" * (1 << 20),
            '{"action": "a1"' + " " * (1 << 20) + "}",
        ]
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 5000), text=garbage)
def test_garbage_never_crashes_and_invalid_always_scores_the_penalty(seed, text):
    obs = ENV.reset(seed, "train")
    parsed = parse_action(text, obs.candidates)
    result = ENV.step(text)
    assert math.isfinite(result.reward)
    if isinstance(parsed, Invalid):
        assert result.reward == INVALID_PENALTY
        assert "invalid" in result.info
    else:  # hypothesis found a legal id: it must be one of the offered candidates
        assert parsed.candidate in obs.candidates
