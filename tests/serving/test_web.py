"""The playground in a real browser: Debian's headless Chromium driven by Playwright (no downloaded browser).

The test types a request, checks that results, the linked program and timings appear, that the fallback
badge shows on a dead planner, and saves screenshots under the test's temporary directory.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexing.stores.server import free_port
from serving.api.app import create_app
from serving.engine import Engine
from serving.http.server import ServerThread
from serving.planner import PlannerSettings
from serving.settings import ApiSettings
from tests.serving.planner_support import FAMILIAR_REQUEST, ScriptedPlanner

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip

GOOD = {
    "sql": "SELECT id FROM products WHERE price < 300 AND id IN <text_1>",
    "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"}],
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make setup installs Debian's chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _serve(
    engines: dict[str, Engine], planner: PlannerSettings, settings: ApiSettings | None = None
) -> ServerThread:
    return ServerThread(create_app(engines, planner, settings or ApiSettings())).start()


def _ask(page: Any, url: str, query: str, *, until: str = "#results tbody tr.result") -> None:
    """Open the page at ``url``, type ``query``, search, and wait for ``until`` to appear."""
    page.goto(url + "/")
    page.fill("#query", query)
    page.click("#go")
    page.wait_for_selector(until, timeout=60_000)


def test_typing_a_request_shows_program_candidates_results_and_timings(
    browser: Any, engines: dict[str, Engine], scripted_planner: ScriptedPlanner, tmp_path: Path
) -> None:
    scripted_planner.completion = json.dumps(GOOD)
    server = _serve(engines, PlannerSettings(url=scripted_planner.url, model="m", retries=0))
    page = browser.new_page()
    try:
        _ask(page, server.url, "wireless headphones with great noise cancelling")
        assert page.locator("#badge").inner_text() == "planner"
        assert page.locator("#results tbody tr.result").count() > 0
        link = page.locator("#program a.ph")
        assert link.inner_text() == "<text_1>"
        assert link.get_attribute("href") == "#cand-text_1"
        assert page.locator("#cand-text_1").is_visible()
        assert "engine_ms" in page.locator("#timings").inner_text()
        assert "price" in page.locator("#results thead").inner_text()
        page.screenshot(path=str(tmp_path / "planner.png"), full_page=True)
    finally:
        page.close()
        server.stop()
    assert (tmp_path / "planner.png").stat().st_size > 0


def test_dead_planner_shows_the_fallback_badge_and_examples_work(
    browser: Any, engines: dict[str, Engine], tmp_path: Path
) -> None:
    dead = PlannerSettings(url=f"http://127.0.0.1:{free_port()}/v1", model="m", retries=0)
    server = _serve(engines, dead)
    page = browser.new_page()
    try:
        page.goto(server.url + "/")
        assert page.locator("button.example[data-domain=email]").count() == 2
        page.fill("#query", "a red lamp")
        page.click("#go")
        page.wait_for_selector("#badge.fallback", timeout=60_000)
        assert "fallback" in page.locator("#badge").inner_text()
        assert "planner_" in page.locator("#reason").inner_text()
        assert page.locator("#results tbody tr.result").count() > 0
        page.screenshot(path=str(tmp_path / "fallback.png"), full_page=True)
        # an example request of the other corpus
        page.locator("button.example[data-domain=email]").first.click()
        page.wait_for_function(
            "document.querySelector('#program').textContent.includes('emails')", timeout=60_000
        )
        assert "subject" in page.locator("#results thead").inner_text()
        page.fill("#query", "")
        page.click("#go")
        assert page.locator("#error").inner_text() == "type a request first"
    finally:
        page.close()
        server.stop()
    assert (tmp_path / "fallback.png").stat().st_size > 0


def test_the_page_offers_only_the_served_corpora(browser: Any, engines: dict[str, Engine]) -> None:
    """A server of one corpus: its menu and example buttons name that corpus only (an email example on an
    ecommerce-only server would answer 422 unknown_domain)."""
    dead = PlannerSettings(url=f"http://127.0.0.1:{free_port()}/v1", model="m", retries=0)
    server = _serve({"ecommerce": engines["ecommerce"]}, dead)
    page = browser.new_page()
    try:
        page.goto(server.url + "/")
        assert page.locator("#domain option").evaluate_all("os => os.map(o => o.value)") == ["ecommerce"]
        assert page.locator("button.example[data-domain=email]").count() == 0
        assert page.locator("button.example[data-domain=ecommerce]").count() == 2
    finally:
        page.close()
        server.stop()


def test_a_fused_answer_says_so_on_the_page(
    browser: Any, engines: dict[str, Engine], scripted_planner: ScriptedPlanner
) -> None:
    """With ``serving.api.fuse``, the badge names the fusion and the line under it says what was fused, since the
    results are not the shown program's own ranking."""
    scripted_planner.completion = json.dumps(GOOD)
    scripted_planner.samples = [json.dumps(GOOD), "not a program"]
    planner = PlannerSettings(url=scripted_planner.url, model="m", retries=0, guided_samples=2)
    server = _serve(engines, planner, ApiSettings(warmup=False, fuse="self-query"))
    page = browser.new_page()
    try:
        _ask(page, server.url, "wireless headphones under $200")
        assert page.locator("#badge").inner_text() == "planner + self-query (fused)"
        reason = page.locator("#reason").inner_text()
        assert (
            reason.startswith("results fuse 2 of 3 planner programs with self-query")
            and "price < 200" in reason
        )
    finally:
        page.close()
        server.stop()


def test_a_familiar_answer_says_the_planner_answered_alone(
    browser: Any, engines: dict[str, Engine], scripted_planner: ScriptedPlanner, gated_card: Path
) -> None:
    """Under the familiar gate, a request worded like a training request is answered by the planner's program
    alone: the badge says planner, not fused, and the line under it says why."""
    scripted_planner.completion = json.dumps(GOOD)
    planner = PlannerSettings(
        url=scripted_planner.url, model="m", retries=0, guided_samples=2, card=str(gated_card)
    )
    server = _serve(engines, planner, ApiSettings(warmup=False, fuse="self-query", fuse_gate="familiar"))
    page = browser.new_page()
    try:
        _ask(page, server.url, FAMILIAR_REQUEST)
        assert page.locator("#badge").inner_text() == "planner"
        assert page.locator("#reason").inner_text() == (
            "worded like the planner's training requests (similarity 1.00): its program answers alone"
        )
    finally:
        page.close()
        server.stop()
