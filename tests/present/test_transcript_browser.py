"""The HTML transcript in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

What a postmortem reader gets: the page renders with no console error and no failed request, the
decision summary is on the first screen of a 1280x800 window without scrolling, the timeline chart
is drawn (one row per step, a mark per decision), and the step detail and the event timeline start
collapsed and open on a click. The Makefile installs Chromium (``make test`` runs this).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bot.present.transcript import render
from tests.present.conftest import transcript_of

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# the flags this machine's closed network needs: no background fetches, no sandbox as root
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: `make test` "
                                "installs Debian's chromium package")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def open_page(browser, html: str, tmp_path: Path):
    file = tmp_path / "transcript.html"
    file.write_text(html, encoding="utf-8")
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.goto(file.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def test_the_decision_summary_is_on_the_first_screen_and_the_chart_is_drawn(scenario, browser,
                                                                         tmp_path):
    e, run = scenario
    t = transcript_of(e, run)
    page, problems = open_page(browser, render(t, "html"), tmp_path)
    try:
        summary = page.locator("#decision-summary")
        assert summary.is_visible()
        box = summary.bounding_box()
        assert box is not None and box["y"] >= 0
        # the whole summary list (not only its heading) is visible without scrolling
        dl = page.locator("#decision-summary dl").bounding_box()
        assert dl is not None and dl["y"] + dl["height"] <= 800, dl
        assert page.evaluate("window.scrollY") == 0
        assert "bob" in page.locator("#decision-summary dl").inner_text()

        chart = page.locator("#decision-summary svg.chart")
        assert chart.is_visible()
        assert chart.locator("rect.step").count() == len(t.steps)
        approvals = [d for d in t.summary.decisions if d.kind == "approved"]
        assert chart.locator("circle.m-approved").count() == len(approvals) > 0
        width = chart.bounding_box()["width"]
        assert 600 < width <= 1280

        # detail starts collapsed: the first step's plan is not shown until opened
        step = page.locator("#steps section.step").first
        assert not step.is_visible()
        page.locator("#steps > summary").click()
        assert step.is_visible()
        assert not page.locator("#timeline table").is_visible()
        page.locator("#timeline > summary").click()
        assert page.locator("#timeline table").is_visible()
        assert problems == []
    finally:
        page.close()


def test_a_hostile_value_stays_text_in_the_browser(make_engine, monkeypatch, browser, tmp_path):
    from tests.present.conftest import RUNBOOK, run_scenario

    e = make_engine({"fence-node": RUNBOOK})
    hostile = "ip-1<img src=x onerror=alert(1)><script>alert(2)</script>"
    run = run_scenario(e, monkeypatch, node=hostile)
    page, problems = open_page(browser, render(transcript_of(e, run), "html"), tmp_path)
    try:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.locator("#steps > summary").click()
        assert page.locator("img").count() == 0
        assert page.evaluate("document.scripts.length") == 0
        assert hostile in page.locator("#decision-summary").inner_text() or \
            hostile in page.locator("#steps").inner_text()
        assert dialogs == [] and problems == []
    finally:
        page.close()


def test_a_large_run_still_fits_its_summary_on_the_first_screen(scenario, browser, tmp_path):
    """A zone outage changes a hundred nodes: the summary shows the first few of each list."""
    from dataclasses import replace

    from bot.present.decision_summary import ChangeLine, Line

    e, run = scenario
    t = transcript_of(e, run)
    many = replace(
        t.summary,
        decisions=[replace(t.summary.decisions[0], by=f"approver{i}") for i in range(40)],
        interlocks=[Line(t.run.created_at, "runbook-bot", f"taint[{i}]", "cap", "refused", i)
                    for i in range(30)],
        changes=[ChangeLine(f"fence[{i}]", "EC2", f"stop Instance i-{i:017x}: running → stopped")
                 for i in range(100)],
        in_place=[f"instance i-{i:017x} stays stopped" for i in range(100)])
    page, problems = open_page(browser, render(replace(t, summary=many), "html"), tmp_path)
    try:
        dl = page.locator("#decision-summary dl").bounding_box()
        assert dl is not None and dl["y"] + dl["height"] <= 800, dl
        assert "and 97 more" in page.locator("#decision-summary").inner_text()
        assert problems == []
    finally:
        page.close()
