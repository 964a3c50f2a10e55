"""The README is a short guide whose results tables are generated from committed runs, whose links resolve, and
which cites nothing outside the repository."""

import re
import subprocess
from pathlib import Path

from lib.reporting.summary import run_results

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
BLOCK = re.compile(
    r"<!-- generated: python -m lib summary (?P<runs>[^>]+?) -->\n(?P<body>.*?)<!-- end generated -->", re.S
)


def test_the_readme_is_a_guide_of_about_two_hundred_lines():
    assert len(README.splitlines()) <= 235  # a guide: lab notes go to docs/; the three results tables are generated


def test_every_generated_table_is_what_the_summary_command_prints_for_its_committed_run():
    blocks = list(BLOCK.finditer(README))
    assert blocks, "no generated block"
    for block in blocks:
        runs = block["runs"].split()
        assert len(runs) == 1
        assert (REPO / runs[0] / "evaluate" / "eval.json").is_file(), runs[0]
        assert block["body"].strip() == run_results(REPO / runs[0]).strip(), f"README block for {runs[0]} is stale"


def test_committed_runs_are_exactly_the_ones_the_readme_quotes():
    tracked = subprocess.run(["git", "ls-files", "outputs"], cwd=REPO, capture_output=True, text=True).stdout.split()
    committed = {Path(p).parts[1] for p in tracked}
    quoted = set(re.findall(r"outputs/(\d{8}-\d{6}-[\w.-]+?)(?=[/`)\s])", README))
    assert committed == quoted, (committed, quoted)


def test_links_resolve_and_nothing_outside_the_repository_is_cited():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith("http"):
            assert (REPO / target).exists(), target
    assert "../" not in README  # nothing above the repository
    for named in re.findall(r"`([\w./-]+\.(?:md|py|ipynb|yaml))`", README):  # every file it names is here
        assert (REPO / named).exists() or (REPO / "lib" / "profiles" / named).exists(), named


def test_a_multi_environment_run_picks_each_environments_profile_and_tables_them_together():
    from lib.pipeline.runner import env_profile
    from lib.reporting.summary import environment_table

    assert env_profile("cpu-smoke", "sentinel_trust") == ("cpu-smoke-sentinel_trust", {})
    assert env_profile("gpu-smollm2", "sentinel_cluster") == ("gpu-smollm2", {"env": "sentinel_cluster"})
    runs = sorted({Path(m.group(1)) for m in re.finditer(r"summary (outputs/\S+) -->", README)})
    table = environment_table([REPO / r for r in runs]).splitlines()
    envs = {line.split(" | ")[0].strip("| ") for line in table[2:]}
    assert envs == {"polyguard", "sentinel_trust", "sentinel_cluster"}
    assert all(line.count("[") == 2 for line in table[2:])  # a CI on both splits for every policy
