"""PolyGuard's format-perfect but harmful answers for the anti-hacking suite, and which anti-cheat rule an ended
episode hit. Each attack must score at most the worst legal action at its state (checked by the generic suite)."""

from __future__ import annotations

from ..base import format_action

HARMFUL_KINDS = ("finish_with_major_risk", "second_pharmacist_review")
ANTI_CHEAT_RULES = ("loop", "review_abuse", "unsafe_end")


def harmful_attacks(env, seed: int, split: str, history: list[str], observation):
    """At a state restored from `history`: finish while a major risk is still in the regimen, and ask for the
    pharmacist review a second time (played one step later, right after the first review)."""
    candidates = observation.candidates
    if any(p.is_major for p in env.current_problems()):
        finish = next(c for c in candidates if c.kind == "finish")
        yield "finish_with_major_risk", history, format_action(finish.id)
    review = next((c for c in candidates if c.kind == "review"), None)
    if review is not None and len(history) + 2 < env.budget:
        after = [*history, format_action(review.id)]
        again = next(c for c in env.restore(seed, split, after).candidates if c.kind == "review")
        yield "second_pharmacist_review", after, format_action(again.id)


def anti_cheat_rule(info: dict) -> str | None:
    """An exploit the env named (loop, review_abuse), or ending with a major risk still in the regimen
    (unsafe_end); None when no rule fired."""
    if info.get("exploit"):
        return info["exploit"]
    if info.get("components", {}).get("anti_cheat", 0.0) < 0:
        return "unsafe_end"
    return None
