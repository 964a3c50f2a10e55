"""The dashboard (lib/serve/dashboard.html) in a real browser: Debian's Chromium driven by Playwright against a
`python -m lib serve` child process serving the committed cpu-smoke run. Each test leaves a screenshot in its
tmp_path. Playwright's own browser download is not used (no internet needed): `make browser` installs Chromium."""

from __future__ import annotations

import json
import re
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from lib.envs import get_spec
from lib.serve.launch import start_server, stop_server, wait_healthy

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RUN = Path(__file__).resolve().parents[1] / "outputs" / "20261123-141137-cpu-smoke"
TIMEOUT_MS = 30_000  # a whole episode is computed per load; generous for a slow CI machine


def api(url: str, path: str, **query) -> dict:
    if query:
        path += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} not found: the dashboard test needs Debian's Chromium. "
            "Install it with `apt-get install -y chromium` (or `make browser`)."
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def write_replay(run_dir: Path, seed: int = 3, split: str = "holdout") -> None:
    """A tiny replay.jsonl in `run_dir`: the teacher's answers for one episode, as if a trained model gave them."""
    spec = get_spec("polyguard")
    env, policy = spec.make_env(), spec.make_policy(spec.teacher)
    observation = env.reset(seed, split)
    policy.begin(seed)
    lines = []
    while True:
        answer = policy.act(observation, env)
        lines.append({"env": "polyguard", "split": split, "seed": seed, "step": len(lines) + 1, "action": answer})
        lines[-1]["artifact"] = {"path": "x", "sha256": "y"}
        result = env.step(answer)
        observation = result.observation
        if result.done:
            break
    (run_dir / "replay.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two servers, started side by side (each takes seconds to start): the committed run as it is (no replay),
    and a copy of it with a replay of holdout seed 3 (`write_replay`)."""
    replay_run = tmp_path_factory.mktemp("replay") / RUN.name
    shutil.copytree(RUN, replay_run)
    write_replay(replay_run)
    started = []
    try:
        for run_dir in (RUN, replay_run):
            started.append(start_server("polyguard", run_dir))
        for process, url in started:
            wait_healthy(process, url)
        yield {"plain": started[0][1], "replay": started[1][1]}
    finally:
        for process, _ in started:
            stop_server(process)


@pytest.fixture(scope="module")
def server(servers):
    return servers["plain"]


@pytest.fixture
def open_page(browser):
    """Opens the dashboard of a server in a fresh page; afterwards, the page must have raised no JavaScript error."""
    pages, errors = [], []

    def opener(url: str):
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        page.goto(url + "/")
        page.wait_for_selector("#policy-a option", state="attached")  # /api/info answered, the selects are filled
        pages.append(page)
        return page

    yield opener
    for page in pages:
        page.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def load(page, policy_a: str, seed, split: str = "holdout", policy_b: str = "none") -> None:
    page.select_option("#split", split)
    page.select_option("#policy-a", policy_a)
    page.select_option("#policy-b", policy_b)
    page.fill("#seed", str(seed))
    page.click("#load")


def shown_return(page, side: str) -> float:
    """The return the panel shows at its last step: its full value (data-return) and its text agree."""
    box = page.locator(f"#return-{side}")
    expect(box).to_have_attribute("data-return", re.compile(r"\S"))
    value = float(box.get_attribute("data-return"))
    assert f"episode return {value:.4f}" in box.inner_text()
    return value


def test_overview_shows_model_gate_and_charts(open_page, server, tmp_path):
    page = open_page(server)
    expect(page.locator("#model-status")).to_contain_text("20261123-141137-cpu-smoke")
    expect(page.locator("#model-status")).to_contain_text("replay.jsonl does not exist")  # no replay in this run
    gate = json.loads((RUN / "gate.json").read_text())
    expect(page.locator("#gate")).to_contain_text("gate PASSED" if gate["passed"] else "gate FAILED")
    expect(page.locator("#gate-checks tbody tr")).to_have_count(len(gate["checks"]))
    expect(page.locator("#evaluated")).to_contain_text("heuristic")
    expect(page.locator("#charts img").first).to_be_visible()
    page.wait_for_function(
        "[...document.querySelectorAll('#charts img')].some((img) => img.complete && img.naturalWidth > 0)"
    )
    assert page.locator("#charts img").count() == len(list((RUN / "charts").glob("*.png")))
    expect(page.locator("#error")).to_be_hidden()
    page.screenshot(path=tmp_path / "overview.png", full_page=True)


def test_step_through_an_episode(open_page, server, tmp_path):
    expected = api(server, "/api/episode", policy="heuristic", split="holdout", seed=3)
    n = len(expected["steps"])
    assert n > 1
    page = open_page(server)
    load(page, "heuristic", 3)
    expect(page.locator("#step-counter")).to_have_text(f"step 1 of {n}")
    expect(page.locator("#obs-a")).to_contain_text("Patient:")
    expect(page.locator("#panel-b")).to_be_hidden()
    expect(page.locator("#prev")).to_be_disabled()
    expect(page.locator("#cands-a tbody tr")).to_have_count(len(expected["steps"][0]["candidates"]))
    expect(page.locator("#cands-a tr.chosen")).to_have_count(1)
    first = expected["steps"][0]
    chosen_id = next(c["id"] for c in first["candidates"] if c["text"] == first["chosen"])
    expect(page.locator("#chosen-a")).to_contain_text(f"chosen: {chosen_id} — {first['chosen']}")
    expect(page.locator("#cands-a tr.chosen")).to_contain_text(chosen_id)
    expect(page.locator("#return-a")).to_be_hidden()  # the return shows at the last step only
    page.locator("#episode").screenshot(path=tmp_path / "episode_step1.png")

    first_observation = page.inner_text("#obs-a")
    page.click("#next")
    expect(page.locator("#step-counter")).to_have_text(f"step 2 of {n}")
    expect(page.locator("#chosen-a")).to_contain_text(expected["steps"][1]["chosen"])
    assert page.inner_text("#obs-a") != first_observation
    for k in range(3, n + 1):
        page.click("#next")
        expect(page.locator("#step-counter")).to_have_text(f"step {k} of {n}")
    expect(page.locator("#next")).to_be_disabled()
    assert shown_return(page, "a") == expected["episode_return"]
    expect(page.locator("#return-a")).to_contain_text(f"end reason: {expected['end_reason']}")
    expect(page.locator("#panel-a .components")).to_contain_text("safety")  # the terminal reward components
    page.locator("#episode").screenshot(path=tmp_path / "episode_end.png")

    page.click("#prev")
    expect(page.locator("#step-counter")).to_have_text(f"step {n - 1} of {n}")
    expect(page.locator("#return-a")).to_be_hidden()
    page.keyboard.press("Home")  # the keys step too (focus is on a button, not a field)
    expect(page.locator("#step-counter")).to_have_text(f"step 1 of {n}")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#step-counter")).to_have_text(f"step 2 of {n}")
    page.keyboard.press("End")
    expect(page.locator("#step-counter")).to_have_text(f"step {n} of {n}")


def test_compare_two_policies_on_one_seed(open_page, server, tmp_path):
    a = api(server, "/api/episode", policy="heuristic", split="holdout", seed=3)
    b = api(server, "/api/episode", policy="oracle", split="holdout", seed=3)
    n = max(len(a["steps"]), len(b["steps"]))
    assert len(a["steps"]) != len(b["steps"])  # so one panel shows that its episode ended
    page = open_page(server)
    load(page, "heuristic", 3, policy_b="oracle")
    expect(page.locator("#step-counter")).to_have_text(f"step 1 of {n}")
    for side in "ab":
        expect(page.locator(f"#panel-{side}")).to_be_visible()
        expect(page.locator(f"#obs-{side}")).to_contain_text("Patient:")
        expect(page.locator(f"#cands-{side} tr.chosen")).to_have_count(1)
    for _ in range(n - 1):
        page.click("#next")
    expect(page.locator("#step-counter")).to_have_text(f"step {n} of {n}")
    assert shown_return(page, "a") == a["episode_return"]
    assert shown_return(page, "b") == b["episode_return"]
    shorter = "a" if len(a["steps"]) < len(b["steps"]) else "b"
    expect(page.locator(f"#panel-{shorter} .ended")).to_contain_text("ended")
    page.locator("#episode").screenshot(path=tmp_path / "compare.png")

    page.reload()  # the address keeps the query: the same comparison loads again
    expect(page.locator("#step-counter")).to_have_text(f"step 1 of {n}")
    expect(page.locator("#policy-b")).to_have_value("oracle")
    expect(page.locator("#obs-b")).to_contain_text("Patient:")


def test_a_bad_seed_is_an_error_and_the_page_keeps_working(open_page, server, tmp_path):
    page = open_page(server)
    for seed in (-1, 5000000):
        load(page, "heuristic", seed)
        expect(page.locator("#error")).to_be_visible()
        expect(page.locator("#error")).to_contain_text(f"seed must be an int in [0, 1000000), got {seed}")
        expect(page.locator("#panel-a")).to_be_hidden()
        expect(page.locator("#step-counter")).to_have_text("no episode")
        page.screenshot(path=tmp_path / f"bad_seed_{seed}.png")  # the viewport: the error box stays in view

        load(page, "heuristic", 3)
        expect(page.locator("#step-counter")).to_have_text(re.compile(r"^step 1 of \d+$"))
        expect(page.locator("#error")).to_be_hidden()
        expect(page.locator("#obs-a")).to_contain_text("Patient:")
        page.click("#next")
        expect(page.locator("#step-counter")).to_have_text(re.compile(r"^step 2 of \d+$"))


def test_replayed_policy_and_its_miss_badge(open_page, servers, tmp_path):
    url = servers["replay"]
    assert "grpo" in api(url, "/api/info")["policies"]
    page = open_page(url)
    expect(page.locator("#policy-a option[value=grpo]")).to_have_count(1)
    expect(page.locator("#model-status")).to_contain_text("1 episode")
    expect(page.locator("#model-status")).not_to_contain_text("replay error")

    held = api(url, "/api/episode", policy="grpo", split="holdout", seed=3)  # the replay holds every step
    assert held["replay_misses"] == 0
    n = len(held["steps"])
    load(page, "grpo", 3)
    for k in range(1, n + 1):
        expect(page.locator("#step-counter")).to_have_text(f"step {k} of {n}")
        expect(page.locator("#panel-a .badge.miss")).to_have_count(0)
        if k < n:
            page.click("#next")
    assert shown_return(page, "a") == held["episode_return"]
    page.locator("#episode").screenshot(path=tmp_path / "replay_held.png")

    missed = api(url, "/api/episode", policy="grpo", split="holdout", seed=4)  # the replay holds none of it
    n = len(missed["steps"])
    assert missed["replay_misses"] == n
    load(page, "grpo", 4)
    for k in range(1, n + 1):
        expect(page.locator("#step-counter")).to_have_text(f"step {k} of {n}")
        expect(page.locator("#panel-a .badge.miss")).to_have_text("replay miss: teacher acted")
        if k == 1:
            page.locator("#episode").screenshot(path=tmp_path / "replay_miss.png")
        if k < n:
            page.click("#next")
    assert shown_return(page, "a") == missed["episode_return"]
    expect(page.locator("#return-a")).to_contain_text(f"replay misses: {n} of {n} steps")
