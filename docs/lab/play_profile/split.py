"""Where a scoring pass's time goes, from a py-spy raw profile (`py-spy record -f raw`) of play: the share of samples
in each of the two passes of lib/candidate_passes.py (the prompts' new tokens, then the candidates' own tokens), split
into attention (SDPA), the linear layers and the rest.

    python docs/lab/play_profile/split.py docs/lab/play_profile/validation_step0_updates_bf16.txt
"""

import sys
from collections import Counter

SDPA = "sdpa_attention_forward (transformers/integrations/sdpa_attention.py"
PASS_2 = "score_rows (lib/candidate_passes.py:99)"


def shares(path: str) -> dict[tuple[str, str], float]:
    counts, total = Counter(), 0
    for line in open(path):
        stack, samples = line.rsplit(" ", 1)
        total += int(samples)
        where = "prompt pass" if "prompt_pass" in stack else "answer pass" if PASS_2 in stack else "elsewhere"
        what = "attention" if SDPA in stack else "linear" if "Linear.forward" in stack else "rest"
        counts[(where, what)] += int(samples)
    return {key: round(n / total, 3) for key, n in sorted(counts.items())}


if __name__ == "__main__":
    for (where, what), share in shares(sys.argv[1]).items():
        print(f"{where:12s} {what:10s} {share:.3f}")
