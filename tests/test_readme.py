"""The README is a short guide whose results tables are generated from committed runs, whose links resolve, and
which cites nothing outside the repository."""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from lib.reporting.summary import run_results
from tests.committed import CLAIM_RUN, committed_runs

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
RESULTS = (REPO / "docs" / "RESULTS.md").read_text()
BLOCK = re.compile(
    r"<!-- generated: python -m lib summary (?P<runs>[^>]+?) -->\n(?P<body>.*?)<!-- end generated -->", re.S
)


def test_the_readme_is_a_front_page_of_at_most_120_lines_built_on_the_claim_run():
    assert len(README.splitlines()) <= 120  # a user's guide; lab notes go to docs/
    assert "PROFILE=cpu-smollm2-polyguard make run" in README
    assert f"<!-- generated: python -m lib summary outputs/{CLAIM_RUN.name} -->" in README
    # the caption counts the trained policies' episodes, not the untrained reference row's fewer (20 a split)
    played = __import__("json").loads((CLAIM_RUN / "evaluate" / "eval.json").read_text())["splits"]["holdout"]
    assert played["policies"]["untrained"]["n"] < played["policies"]["grpo"]["n"]
    assert f"{played['policies']['grpo']['n']} episodes per split, greedy" in README


def test_every_generated_table_is_what_the_summary_command_prints_for_its_committed_run():
    blocks = list(BLOCK.finditer(README)) + list(BLOCK.finditer(RESULTS))
    assert len(list(BLOCK.finditer(README))) == 1, "the README's one generated table is the claim run's"
    for block in blocks:
        runs = block["runs"].split()
        assert len(runs) == 1
        assert (REPO / runs[0] / "evaluate" / "eval.json").is_file(), runs[0]
        assert block["body"].strip() == run_results(REPO / runs[0]).strip(), f"README block for {runs[0]} is stale"


MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|home|root|work|Users)/")  # where a run was made, not what it is


def test_no_committed_run_file_names_the_machine_it_ran_on():
    """Executed notebooks print working folders and interpreters: a committed run keeps them relative to the repo."""
    found = []
    for run in committed_runs():
        for path in sorted(
            p for p in run.rglob("*") if p.is_file() and p.suffix in (".ipynb", ".json", ".jsonl", ".md")
        ):
            if MACHINE_PATH.search(path.read_text(encoding="utf-8", errors="replace")):
                found.append(str(path.relative_to(REPO)))
    assert not found, found


def test_committed_runs_are_exactly_the_ones_the_readme_and_the_results_quote():
    committed = {run.name for run in committed_runs()}
    # a run id in its default form (date-time-profile) anywhere in the two, and any committed run they name
    # (of docs/RESULTS.md, its section on the committed runs: its dated history names runs long removed)
    section = RESULTS[RESULTS.index("## The committed runs") : RESULTS.index("## Where the round ends")]
    quoted = set(re.findall(r"outputs/(\d{8}-\d{6}-[\w.-]+?)(?=[/`)\s])", README + section))
    quoted |= {name for name in committed if re.search(rf"outputs/{re.escape(name)}(?=[/`)\s])", README + section)}
    assert committed == quoted, (committed, quoted)
    # and every run folder the README cites by path (whatever its id) is one git tracks: outputs/ is ignored, so a
    # run that exists here but was never `git add -f`-ed would be missing from a clean checkout
    cited = {m for m in re.findall(r"outputs/([\w.-]+?)(?=[/`)\s])", README) if (REPO / "outputs" / m).is_dir()}
    assert cited <= committed, f"cited but not committed (git add -f): {sorted(cited - committed)}"


def _anchors(path: Path) -> Iterator[str]:
    """GitHub's heading anchors of a Markdown file: lower case, punctuation but - and _ dropped, spaces to -, a
    repeated heading numbered -1, -2, ... (headings inside code fences are not headings)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        yield slug if count == 0 else f"{slug}-{count}"


def broken_links(path: Path) -> list[str]:
    """Every relative link `[text](target#anchor)` of a Markdown file whose file (relative to the file's folder)
    or anchor does not exist, or that leads out of the repository."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        inside = not file or (resolved.is_relative_to(REPO) and resolved.exists())
        if not inside or (anchor and resolved.is_file() and anchor not in set(_anchors(resolved))):
            broken.append(target)
    return broken


MARKDOWN = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("lib/envs/*/README.md"))]


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(path):
    assert not broken_links(path), broken_links(path)


def test_the_link_check_finds_a_missing_anchor_a_missing_file_and_a_file_outside_the_repository(tmp_path):
    page, other = tmp_path / "page.md", tmp_path / "other.md"
    other.write_text("# Other\n")
    page.write_text("# Two words\n\n## Two words\n\n[a](#two-words) [b](#two-words-1) [c](#three) [d](none.md)\n")
    assert broken_links(page) == ["#three", "none.md"]
    page.write_text("[e](other.md#other)\n")  # exists, but a temporary folder is outside the repository
    assert broken_links(page) == ["other.md#other"]


def test_links_resolve_and_nothing_outside_the_repository_is_cited():
    assert not broken_links(REPO / "README.md")
    assert "../" not in README  # nothing above the repository
    for named in re.findall(r"`([\w./-]+\.(?:md|py|ipynb|yaml))`", README):  # every file it names is here
        assert (REPO / named).exists() or (REPO / "lib" / "profiles" / named).exists(), named


def test_a_multi_environment_run_picks_each_environments_profile_and_tables_them_together():
    from lib.pipeline.runner import env_profile
    from lib.reporting.summary import environment_table

    assert env_profile("cpu-smoke", "sentinel_trust") == ("cpu-smoke-sentinel_trust", {})
    assert env_profile("gpu-smollm2", "sentinel_cluster") == ("gpu-smollm2", {"env": "sentinel_cluster"})
    runs = sorted({Path(m.group(1)) for m in re.finditer(r"summary (outputs/\S+) -->", RESULTS)})
    table = environment_table([REPO / r for r in runs]).splitlines()
    envs = {line.split(" | ")[0].strip("| ") for line in table[2:]}
    assert envs == {"polyguard", "sentinel_trust", "json_tasks"}
    assert all(line.count("[") == 2 for line in table[2:])  # a CI on both splits for every policy


def test_the_guide_names_every_gate_check_and_exactly_the_outcome_checks_of_the_code():
    from lib.gate import CHECKS, OUTCOME_CHECKS

    guide = (REPO / "docs" / "GUIDE.md").read_text()
    bullet = re.search(r"^- \*\*Gate\*\* .*?(?=^- \*\*|^#)", guide, re.S | re.M)[0]
    named = re.findall(r"`(\w+)`\s+\(", bullet)  # each check as `name` (what it proves)
    assert [n for n in named if n in CHECKS] == list(CHECKS), named
    outcome = re.search(r"outcome checks \(`OUTCOME_CHECKS`\): (.*?)\. Only these depend on", bullet, re.S)[1]
    assert re.findall(r"`(\w+)`\s+\(", outcome) == list(OUTCOME_CHECKS)


def test_the_profiles_cite_only_results_sections_that_exist():
    sections = set(_anchors(REPO / "docs" / "RESULTS.md"))
    cited = {
        (profile.name, anchor)
        for profile in sorted((REPO / "lib" / "profiles").glob("*.yaml"))
        for anchor in re.findall(r"docs/RESULTS\.md#([\w-]+)", profile.read_text())
    }
    assert cited, "no profile cites a section of docs/RESULTS.md"
    assert not {c for c in cited if c[1] not in sections}


def test_the_lab_notebook_opens_with_the_ledger_and_the_lever_index():
    """docs/RESULTS.md's first 80 lines: a ledger with a row per environment, and a lever index whose header names
    the lever; every retired setting is a row of it."""
    from lib.config import RETIRED
    from lib.envs import builtin_names

    head = (REPO / "docs" / "RESULTS.md").read_text(encoding="utf-8").splitlines()[:80]
    ledger = head.index("## The ledger")
    index = head.index("## The lever index")
    ledger_rows = [row for row in head[ledger:index] if row.startswith("| ") and not row.startswith("| ---")][1:]
    names = {"polyguard": "PolyGuard", "sentinel_trust": "SENTINEL trust", "sentinel_cluster": "SENTINEL cluster"}
    for env in builtin_names():
        assert any(row.startswith(f"| {names.get(env, env)} |") for row in ledger_rows), f"no ledger row for {env}"
    assert any(row.startswith("| lever | verdict |") for row in head[index:]), "no lever index header"
    levers = {row.split("`")[1] for row in head[index:] if row.startswith("| `")}
    missing = [key for key in RETIRED if not key.startswith("corpus.extras") and key not in levers]
    assert missing == [], f"retired settings without a row in the lever index: {missing}"


CLAIM = re.compile(r"<!-- claim -->(.+?)<!-- end claim -->", re.S)


def test_the_readme_and_the_results_say_the_same_of_the_claim_and_the_claim_run_agrees():
    """One sentence, the same in both files; and what it says of PolyGuard is what the committed claim run's
    eval.json shows: its RL policy above the teacher (paired CI) and below the best scripted baseline."""
    said = [m[1].strip() for m in CLAIM.finditer(README)], [m[1].strip() for m in CLAIM.finditer(RESULTS)]
    assert len(said[0]) == 1 and said[0] == said[1], said
    report = __import__("json").loads((CLAIM_RUN / "evaluate" / "eval.json").read_text())
    holdout = report["splits"]["holdout"]
    rl = holdout["policies"]["grpo"]["mean_return"]
    oracle = report["roles"]["oracle"]  # reads what no prompt shows: an upper reference, not a competitor
    best = max(
        (p["mean_return"], name)
        for name, p in holdout["policies"].items()
        if p["kind"] in ("baseline", "trivial") and name != oracle
    )
    beats_teacher = holdout["paired"]["grpo-teacher"]["ci95"][0] > 0
    beats_every_baseline = rl > best[0]
    sentence = said[0][0]
    if beats_teacher and not beats_every_baseline:
        assert "holds on no environment" in sentence and f"`{best[1]}`" in sentence, (sentence, best)
    else:  # the run says something else now: the sentence, and this test, must be rewritten from it
        raise AssertionError(f"the claim run no longer matches the sentence: teacher {beats_teacher}, best {best}")
