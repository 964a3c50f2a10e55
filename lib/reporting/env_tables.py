"""`python -m lib env-table`: an environment README's baseline tables in Markdown, from a fresh evaluation of every
reported policy. `lib/evaluation/baselines.py` plays the episodes (`run_baselines`) and lays out the policy table
(`markdown_table`); this module only adds the caption and the paired differences against the teacher.

Each environment README holds the command's output between `<!-- generated: python -m lib env-table ... -->` and
`<!-- end generated -->`; tests/test_env_readmes.py runs each marker's command again and compares.
"""

from __future__ import annotations

import re

from ..evaluation.baselines import markdown_table
from ..stats import paired_difference

GENERATED = re.compile(
    r"<!-- generated: python -m lib (?P<command>env-table [^>]*?) -->\n(?P<body>.*?)<!-- end generated -->", re.S
)


def _signed(d: dict) -> str:
    return "{:+.3f} [{:+.3f}, {:+.3f}]".format(d["mean"], *d["ci95"])


def _caption(reports: dict[str, dict]) -> str:
    first = next(iter(reports.values()))
    n, seed = first["episodes"], first["seed"]
    splits = " and ".join(f"`{s}`" for s in reports)
    return (
        f"`{first['env']}`: every reported policy on seeds {seed}-{seed + n - 1} of {splits} ({n} episodes per "
        'split), mean return with a bootstrap 95% CI; "ended by a rule": the share of episodes an anti-cheat '
        "rule ended."
    )


def _against_teacher(reports: dict[str, dict]) -> list[str]:
    """Each other baseline minus the teacher, then the best trivial policy minus the teacher, paired by seed, per
    split; the baselines in the policy table's order."""
    first = next(iter(reports.values()))
    teacher = first["teacher"]
    if any(teacher not in r["policies"] for r in reports.values()):
        return []
    policies = first["policies"]
    others = [
        n
        for n in sorted(policies, key=lambda n: -policies[n]["mean_return"])
        if n != teacher and policies[n]["kind"] == "baseline"
    ]
    lines = [
        "",
        f"| minus the teacher (`{teacher}`), paired by seed | " + " | ".join(reports) + " |",
        "|" + " --- |" * (1 + len(reports)),
    ]

    def diff(report: dict, name: str) -> str:
        return _signed(paired_difference(report["policies"][name]["returns"], report["policies"][teacher]["returns"]))

    for name in others:
        lines.append(f"| {name} | " + " | ".join(diff(r, name) for r in reports.values()) + " |")
    cells = []
    for report in reports.values():
        trivial = {n: r["mean_return"] for n, r in report["policies"].items() if r["kind"] == "trivial"}
        if not trivial:
            return lines
        best = max(trivial, key=trivial.get)
        cells.append(f"`{best}` {diff(report, best)}")
    lines.append("| the best trivial policy | " + " | ".join(cells) + " |")
    return lines


def env_tables(reports: dict[str, dict]) -> str:
    """{split: run_baselines report}, the splits sharing one environment, episode count and first seed: a caption,
    every policy's mean return [95% CI] and share ended by a rule per split (best on the first split first), then
    each other baseline and the best trivial policy minus the teacher, paired by seed. Nothing that varies between
    runs of the same command (the environment's speed) is in it."""
    firsts = {(r["env"], r["episodes"], r["seed"]) for r in reports.values()}
    if len(firsts) != 1:
        raise ValueError(f"the splits' reports differ in environment, episodes or seed: {sorted(firsts)}")
    return "\n".join([_caption(reports), "", markdown_table(reports), *_against_teacher(reports)])


def generated_blocks(text: str) -> list[tuple[str, str]]:
    """(command after `python -m lib `, body) of every env-table block in a README's text."""
    return [(m["command"], m["body"]) for m in GENERATED.finditer(text)]
