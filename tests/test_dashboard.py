"""The dashboard (lib/serve/dashboard.html) in a real browser: Debian's Chromium driven by Playwright against a
`python -m lib serve` child process serving the committed cpu-smoke run. Each test leaves a screenshot in its
tmp_path. Playwright's own browser download is not used (no internet needed): `make browser` installs Chromium."""

from __future__ import annotations

import json
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from lib.envs import get_spec
from lib.serve.launch import served

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
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def server():
    with served("polyguard", run_dir=RUN) as url:
        yield url


def open_page(browser, url: str):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    page.goto(url + "/")
    page.wait_for_selector("#policy-a option")  # /api/info answered and the selects are filled
    return page


def load(page, policy_a: str, seed, split: str = "holdout", policy_b: str = "none") -> None:
    page.select_option("#split", split)
    page.select_option("#policy-a", policy_a)
    page.select_option("#policy-b", policy_b)
    page.fill("#seed", str(seed))
    page.click("#load")


def shown_return(page, side: str) -> float:
    """The return the panel shows at its last step: its full value (data-return) and its text agree."""
    from playwright.sync_api import expect

    box = page.locator(f"#return-{side}")
    expect(box).to_have_attribute("data-return", r"\S+")
    value = float(box.get_attribute("data-return"))
    assert f"episode return {value:.4f}" in box.inner_text()
    return value


def test_overview_shows_model_gate_and_charts(browser, server, tmp_path):
    from playwright.sync_api import expect

    page = open_page(browser, server)
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
    page.close()


def test_step_through_an_episode(browser, server, tmp_path):
    from playwright.sync_api import expect

    expected = api(server, "/api/episode", policy="heuristic", split="holdout", seed=3)
    n = len(expected["steps"])
    assert n > 1
    page = open_page(browser, server)
    load(page, "heuristic", 3)
    expect(page.locator("#step-counter")).to_have_text(f"step 1 of {n}")
    expect(page.locator("#obs-a")).to_contain_text("Patient:")
    expect(page.locator("#panel-b")).to_be_hidden()
    expect(page.locator("#prev")).to_be_disabled()
    expect(page.locator("#cands-a tbody tr")).to_have_count(len(expected["steps"][0]["candidates"]))
    expect(page.locator("#cands-a tr.chosen")).to_have_count(1)
    expect(page.locator("#chosen-a")).to_contain_text(expected["steps"][0]["chosen"])
    expect(page.locator("#return-a")).to_be_hidden()  # the return shows at the last step only
    page.screenshot(path=tmp_path / "episode_step1.png", full_page=True)

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
    page.screenshot(path=tmp_path / "episode_end.png", full_page=True)

    page.click("#prev")
    expect(page.locator("#step-counter")).to_have_text(f"step {n - 1} of {n}")
    expect(page.locator("#return-a")).to_be_hidden()
    page.close()


def test_compare_two_policies_on_one_seed(browser, server, tmp_path):
    from playwright.sync_api import expect

    a = api(server, "/api/episode", policy="heuristic", split="holdout", seed=3)
    b = api(server, "/api/episode", policy="oracle", split="holdout", seed=3)
    n = max(len(a["steps"]), len(b["steps"]))
    assert len(a["steps"]) != len(b["steps"])  # so one panel shows that its episode ended
    page = open_page(browser, server)
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
    page.screenshot(path=tmp_path / "compare.png", full_page=True)
    page.close()


@pytest.mark.parametrize("seed", [-1, 5000000])
def test_a_bad_seed_is_an_error_and_the_page_keeps_working(browser, server, tmp_path, seed):
    from playwright.sync_api import expect

    page = open_page(browser, server)
    load(page, "heuristic", seed)
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_contain_text("seed")
    expect(page.locator("#panel-a")).to_be_hidden()
    page.screenshot(path=tmp_path / "bad_seed.png", full_page=True)

    load(page, "heuristic", 3)
    expect(page.locator("#step-counter")).to_have_text("step 1 of ", timeout=TIMEOUT_MS)
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator("#obs-a")).to_contain_text("Patient:")
    page.close()


def teacher_answers(seed: int, split: str = "holdout") -> list[str]:
    """The teacher's answers for one episode: a replay that matches a real policy's actions step for step."""
    spec = get_spec("polyguard")
    env, policy = spec.make_env(), spec.make_policy(spec.teacher)
    observation = env.reset(seed, split)
    policy.begin(seed)
    answers = []
    while True:
        answers.append(policy.act(observation, env))
        result = env.step(answers[-1])
        observation = result.observation
        if result.done:
            return answers


def test_replayed_policy_and_its_miss_badge(browser, tmp_path):
    from playwright.sync_api import expect

    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    lines = [
        {"env": "polyguard", "split": "holdout", "seed": 3, "step": k, "action": answer}
        | {"artifact": {"path": "x", "sha256": "y"}}
        for k, answer in enumerate(teacher_answers(3), 1)
    ]
    (run / "replay.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    with served("polyguard", run_dir=run) as url:
        assert "grpo" in api(url, "/api/info")["policies"]
        page = open_page(browser, url)
        expect(page.locator("#model-status")).to_contain_text("1 episode")
        expect(page.locator("#model-status")).not_to_contain_text("replay error")

        held = api(url, "/api/episode", policy="grpo", split="holdout", seed=3)
        assert held["replay_misses"] == 0
        load(page, "grpo", 3)
        n = len(held["steps"])
        expect(page.locator("#step-counter")).to_have_text(f"step 1 of {n}")
        for k in range(1, n + 1):
            expect(page.locator("#step-counter")).to_have_text(f"step {k} of {n}")
            expect(page.locator("#panel-a .badge.miss")).to_have_count(0)
            if k < n:
                page.click("#next")
        assert shown_return(page, "a") == held["episode_return"]
        page.screenshot(path=tmp_path / "replay_held.png", full_page=True)

        missed = api(url, "/api/episode", policy="grpo", split="holdout", seed=4)
        n = len(missed["steps"])
        assert missed["replay_misses"] == n
        load(page, "grpo", 4)
        expect(page.locator("#step-counter")).to_have_text(f"step 1 of {n}")
        for k in range(1, n + 1):
            expect(page.locator("#step-counter")).to_have_text(f"step {k} of {n}")
            expect(page.locator("#panel-a .badge.miss")).to_have_text("replay miss: teacher acted")
            if k == 1:
                page.screenshot(path=tmp_path / "replay_miss.png", full_page=True)
            if k < n:
                page.click("#next")
        assert shown_return(page, "a") == missed["episode_return"]
        expect(page.locator("#return-a")).to_contain_text(f"replay misses: {n} of {n} steps")
        page.close()
