"""The explorer as a reader uses it, in a real headless browser (Debian's chromium driven by
Playwright), on a kept devnet with a cheating worker (int8) and a lazy committee member: search a
job hash, follow the cheater's job to its slash, open the lazy member's page (its lies shown as
lies), a batch, a block, a transaction; filter and page the lists; watch an open audit say what
happens next and by which block, checked against the contract. Every wait is on a DOM or chain
condition. ``VERILLM_EXPLORER_SCREENSHOTS=DIR`` keeps a screenshot of each page (docs/explorer/);
``VERILLM_KEPT_DEVNET=WORKDIR/network.json`` runs against a devnet already kept with the same options."""

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("anvil_installed")
CHROMIUM = os.environ.get("VERILLM_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def kept(two_cheater_devnet):
    """The session's two-cheater devnet (tests/e2e/conftest.py), shared with test_audit_outcomes_agree.py."""
    return two_cheater_devnet


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _roles(kept) -> dict[str, str]:
    return {n["role"]: n["address"] for n in kept["nodes"]}


def test_lists_refuse_out_of_range_pages_and_unknown_filters_with_400(kept):
    base = kept["gateway_url"] + "/v1/verillm/explorer/"
    for query in ("jobs?limit=-1", "jobs?limit=0", "jobs?limit=201", "jobs?limit=1000000000000", "jobs?limit=ten", "audits?limit=-5",
                  "jobs?offset=-1", "audits?offset=99999999999", "nodes/0x" + "00" * 20 + "?limit=500"):
        status, body = _get(base + query)
        name = "offset" if "offset" in query else "limit"
        assert status == 400 and body["error"]["message"].startswith(f"{name}: expected an integer from "), (query, status, body)
    for query, name in (("jobs?status=won", "status"), ("audits?verdict=maybe", "verdict"), ("jobs?worker=0x12", "worker"), ("jobs?model=zz", "model")):
        status, body = _get(base + query)
        assert status == 400 and body["error"]["message"].startswith(name), (query, body)
    status, body = _get(base + "jobs?limit=200&offset=0")
    assert status == 200 and body["limit"] == 200 and len(body["jobs"]) == body["total"] >= 10


def test_the_lists_agree_with_the_status_route_and_the_chain(kept):
    base = kept["gateway_url"] + "/v1/verillm/explorer/"
    _, jobs = _get(base + "jobs?limit=200")
    for job in jobs["jobs"]:
        _, status = _get(kept["gateway_url"] + "/v1/verillm/audits/" + job["job_hash"])
        assert job["status"] == status["status"], job["job_hash"]
    _, summary = _get(base + "summary")
    _, audits = _get(base + "audits?limit=200")
    assert sum(summary["audits"].values()) == audits["total"] >= 10
    lazy = _roles(kept)["lazy member"].lower()
    lies = [v for a in audits["audits"] for v in a["votes"] if v["lie"]]
    assert lies and {v["node"].lower() for v in lies} == {lazy} and all(v["vote"] == 1 for v in lies)  # its ✓ votes, caught
    _, slashed_only = _get(base + "jobs?status=slashed")
    assert slashed_only["total"] >= 1 and {j["status"] for j in slashed_only["jobs"]} == {"slashed"}
    cheater = _roles(kept)["cheater (int8)"]
    _, by_worker = _get(base + "audits?worker=" + cheater)
    assert by_worker["total"] >= 1 and {a["worker"].lower() for a in by_worker["audits"]} == {cheater.lower()}
    nodes = len(kept["nodes"])  # the devnet's own count (10 with two cheaters since issue 34: a tie can be appealed)
    assert summary["slashes"]["convictions"] >= 2 and summary["nodes"]["registered"] == nodes and summary["nodes"]["active"] == nodes - 2


def _shoot(page, name: str, directory: Path) -> None:
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000


def _ready(page, hash_: str) -> None:
    """Wait until the page for ``hash_`` is drawn (the view marks the route it drew)."""
    page.wait_for_function(f"document.getElementById('view').dataset.ready === {json.dumps(hash_)}", timeout=WAIT_MS)


def _follow(page, locator) -> str:
    """Click a link and wait until the page it opens is drawn; return its route."""
    before = page.evaluate("location.hash")
    locator.click()
    page.wait_for_function(f"location.hash !== {json.dumps(before)}", timeout=WAIT_MS)
    route = page.evaluate("location.hash")
    _ready(page, route)
    return route


def _in_view(page, selector: str) -> bool:
    return page.eval_on_selector(selector, "e => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }")


def test_the_explorer_pages_in_a_real_browser(kept, tmp_path):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: `make install` installs Debian's chromium (apt-get install -y chromium)")
    shots = Path(os.environ.get("VERILLM_EXPLORER_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    roles = _roles(kept)
    slashed = next(job for job in kept["jobs"] if job["status"] == "slashed")["job_hash"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(kept["explorer_url"])
            page.wait_for_selector("#summary .card", timeout=WAIT_MS)
            page.wait_for_selector('svg[data-plot="activity"] rect.bar-jobs', timeout=WAIT_MS)
            assert page.locator('svg[data-plot="stake"] rect.bar-slashed').count() == len(kept["nodes"])
            assert page.locator("#nodes tbody tr").count() == len(kept["nodes"]) and "inactive" in page.locator("#nodes").inner_text()
            assert page.locator('.verdict-count[data-verdict="fail"]').count() == 1
            _shoot(page, "overview", shots)
            # A click lands on what it opened: from the bottom of the overview, the audit's page at its top.
            page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
            assert page.evaluate("scrollY") > 0
            assert _follow(page, page.locator("#audits a[data-link=audit]").last).startswith("#/audit/")
            assert page.evaluate("scrollY") == 0 and _in_view(page, "#page-title")

            # Search a job hash: the page lands on the job.
            page.fill("#q", slashed)
            page.press("#q", "Enter")
            _ready(page, f"#/job/{slashed}")
            assert "slashed" in page.locator("dl.facts").inner_text()
            assert page.locator("#seats tr.caught").count() >= 1  # the worker that failed

            # Follow a job to its slash from the filtered list: the click lands on the slash, highlighted.
            page.goto(kept["explorer_url"] + "#/jobs?status=slashed")
            _ready(page, "#/jobs?status=slashed")
            assert {r.get_attribute("data-status") for r in page.locator("#jobs tr.job").all()} == {"slashed"}
            cheater = roles["cheater (int8)"].lower()
            page.locator(f'tr.job[data-job="{slashed}"] a[data-link="slash"][href$="focus=slash-{cheater}"]').click()
            page.wait_for_selector('#timeline li.focused[data-event="PartySlashed"]', timeout=WAIT_MS)
            assert _in_view(page, "#timeline li.focused")
            assert "failed audit" in page.locator("#timeline li.focused").inner_text()
            _shoot(page, "job", shots)

            # Pages of a list: three at a time, the next page holds the next three.
            page.goto(kept["explorer_url"] + "#/jobs?limit=3")
            _ready(page, "#/jobs?limit=3")
            first = [r.get_attribute("data-job") for r in page.locator("#jobs tr.job").all()]
            assert len(first) == 3 and " 1–3 of " in page.locator(".pager").inner_text()
            assert _follow(page, page.locator('a[data-page="older"]')) == "#/jobs?limit=3&offset=3"
            second = [r.get_attribute("data-job") for r in page.locator("#jobs tr.job").all()]
            assert len(second) == 3 and not set(first) & set(second)

            # The lazy member's page: its agree votes shown as the lies they were, its stake history slashed.
            page.fill("#q", roles["lazy member"])
            page.press("#q", "Enter")
            _ready(page, "#/node/" + roles["lazy member"].lower())
            assert page.locator("#node-votes tr.caught .vote-lie").count() >= 1
            assert "adjudicated" in page.locator("#node-slashes").inner_text()
            assert page.locator('#stake-history tr[data-event="Slashed"]').count() >= 1
            _shoot(page, "node", shots)

            # An audit the lazy member lied in: its seat marked, the vote struck through.
            assert _follow(page, page.locator("#node-votes a[data-link=audit]").first).startswith("#/audit/")
            assert page.locator(f'#seats tr.caught[data-party="{roles["lazy member"].lower()}"] .vote-lie').count() == 1
            _shoot(page, "audit", shots)

            # A batch, a block and a transaction, each reached by a click that lands on its page's top.
            assert _follow(page, page.locator("dl.facts a[data-link=batch]").first).startswith("#/batch/")
            assert page.locator("#batch-audits tbody tr[data-audit]").count() >= 1
            assert _in_view(page, "#page-title") and page.evaluate("scrollY") == 0
            _shoot(page, "batch", shots)
            assert _follow(page, page.locator("dl.facts a.block-link").first).startswith("#/block/")
            assert page.locator('#timeline li[data-event="BatchPosted"]').count() == 1 and _in_view(page, "#page-title")
            _shoot(page, "block", shots)
            assert _follow(page, page.locator("#timeline a[data-link=tx]").first).startswith("#/tx/0x")
            assert page.locator("#timeline li").count() >= 1 and "Transaction" in page.locator("#page-title").inner_text()

            # An open audit: what happens next, by whom, by which block (the contract's deadline).
            _open_audit_next_step(kept, page, shots)
        finally:
            browser.close()


PHONE = {"width": 390, "height": 844}


def _fits_the_phone(page) -> None:
    """Nothing wider than the screen, and every vote cell on it (issue 36: 945 px at 390)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    if width > PHONE["width"]:
        # name the element that sticks out, so a failure says what to fix
        culprit = page.evaluate("""w => { let worst = null; for (const el of document.querySelectorAll('body *')) {
            const r = el.getBoundingClientRect(); if (r.right > w + 0.5 && (!worst || r.width < worst[1])) worst = [el.tagName + (el.id ? '#' + el.id : '') + '.' + el.className + ' ' + (el.textContent || '').slice(0, 60), r.width, r.right]; }
            return worst; }""", PHONE["width"])
        raise AssertionError(f"{page.evaluate('location.hash')}: {width} px wide at {PHONE['width']}; narrowest element past the edge: {culprit}")
    for box in page.eval_on_selector_all("td.votes, td[data-label]", "cells => cells.map(c => { const r = c.getBoundingClientRect(); return [r.left, r.right]; })"):
        assert box[0] >= 0 and box[1] <= PHONE["width"] + 0.5, box


def test_the_explorer_at_phone_width(kept, tmp_path):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: `make install` installs Debian's chromium (apt-get install -y chromium)")
    shots = Path(os.environ.get("VERILLM_EXPLORER_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    roles = _roles(kept)
    slashed = next(job for job in kept["jobs"] if job["status"] == "slashed")["job_hash"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True)
        try:
            page = browser.new_page(viewport=PHONE, is_mobile=True)
            page.goto(kept["explorer_url"])
            page.wait_for_selector("#summary .card", timeout=WAIT_MS)
            _fits_the_phone(page)
            _shoot(page, "phone-overview", shots)
            page.goto(kept["explorer_url"] + f"#/job/{slashed}")
            _ready(page, f"#/job/{slashed}")
            _fits_the_phone(page)
            assert page.locator("#seats td.votes").count() >= 1
            _shoot(page, "phone-job", shots)
            assert _follow(page, page.locator("dl.facts a[data-link=audit]").first).startswith("#/audit/")
            _fits_the_phone(page)
            _shoot(page, "phone-audit", shots)
            page.goto(kept["explorer_url"] + "#/node/" + roles["lazy member"].lower())
            _ready(page, "#/node/" + roles["lazy member"].lower())
            _fits_the_phone(page)
            for route in ("#/jobs", "#/audits"):
                page.goto(kept["explorer_url"] + route)
                _ready(page, route)
                _fits_the_phone(page)
        finally:
            browser.close()


PHASE_DEADLINES = {4: ("reveal_by", "round_draw_by"), 1: ("commit_by", "publish_by"), 2: ("worker_open_by", "members_open_by"), 3: ("dispute_by",)}
"""The deadlines `spec.deadlines.compute_round_deadline` names in each open phase, by `Phase` code (DRAWING 4,
COMMITTING 1, OPENING 2, DECIDED 3)."""


def _open_audit_next_step(kept, page, shots: Path) -> None:
    """Send one more job; on its page, wait for its audit to say what happens next, and check the
    deadline shown against the contract's round (read when the page shows that same phase)."""
    from verillm.chain import RpcChain
    from verillm.chain.deploy import Deployment
    from verillm.chain.protocol import Protocol
    from verillm.client import Client
    from verillm.spec.deadlines import compute_round_deadline

    protocol = Protocol(RpcChain(kept["rpc_url"]), Deployment.load(kept["addresses_file"]))
    job = Client(kept["gateway_url"]).complete("What happens next?", max_tokens=3, temperature=0).job_id
    page.goto(kept["explorer_url"] + f"#/job/{job}")
    _ready(page, f"#/job/{job}")
    p = protocol.preset
    for _ in range(12):  # each pass waits for the page to show another step: at most the audit's few phases
        step = page.wait_for_selector("#next-step li[data-by-block]", timeout=180_000)
        code = int(page.get_attribute("#next-step", "data-phase-code"))
        action, by_block = step.get_attribute("data-action"), step.get_attribute("data-by-block")
        audit_id = int(page.locator("dl.facts a[data-link=audit]").first.inner_text().split("#")[1])
        state = protocol.get_audit(audit_id)
        phase, commit_deadline, ready, verdict_block = protocol.jobs.call("getRound", audit_id, state.round)[:4]
        live = protocol.get_round_state(audit_id, state.round)
        entered = live.deadlines.entered_block  # the round's start, or its appeal
        if phase == code and by_block:
            expected = {"drawRound": entered + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS,
                        "revealRound": entered + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS,
                        "postCommitteeReceipt": commit_deadline, "publishTranscript": live.publish_deadline, "drawChallenge": ready + p.AUDIT_DRAW_DELAY_BLOCKS + p.OPEN_WINDOW_BLOCKS,
                        "openWorker": ready + p.AUDIT_DRAW_DELAY_BLOCKS + p.OPEN_WINDOW_BLOCKS,
                        "sealVote": ready + p.AUDIT_DRAW_DELAY_BLOCKS + 2 * p.OPEN_WINDOW_BLOCKS,
                        "openAndVote": ready + p.AUDIT_DRAW_DELAY_BLOCKS + 3 * p.OPEN_WINDOW_BLOCKS,
                        "dispute": verdict_block + p.DISPUTE_WINDOW_BLOCKS}[action]
            assert int(by_block) == expected, (action, by_block, expected)
            assert "by block" in page.locator("#next-step").inner_text()
            # the job's own line: the deadline its step waits on (the status body's, Jobs.getRoundState's) and the latest final block
            ends = page.locator("#phase-ends")
            # one read of the round per page: the job's line names a deadline of the phase its next step shows
            assert ends.get_attribute("data-deadline") in PHASE_DEADLINES[code], (code, ends.get_attribute("data-deadline"))
            if ends.get_attribute("data-deadline") != compute_round_deadline(live).name:
                # the round moved on inside its phase (the worker opened) between the page's read and this one: the page follows
                page.wait_for_function("document.querySelector('#phase-ends')?.dataset.deadline !== " + json.dumps(ends.get_attribute("data-deadline")),
                                       timeout=180_000)
                continue
            assert int(ends.get_attribute("data-block")) == compute_round_deadline(live).block, ends.inner_text()
            assert ends.get_attribute("data-deadline") == compute_round_deadline(live).name and "block" in ends.inner_text()
            assert int(page.get_attribute("#final-by", "data-block")) >= int(ends.get_attribute("data-block"))
            _shoot(page, "open-audit", shots)
            return
        # the chain moved on since the page was drawn: wait for the page to show the next step
        page.wait_for_function(f"""(() => {{ const n = document.querySelector('#next-step'), li = n && n.querySelector('li[data-by-block]');
            return !li || li.dataset.action !== {json.dumps(action)} || n.dataset.phaseCode !== {json.dumps(str(code))}; }})()""", timeout=180_000)
    pytest.fail("the page never showed a step the chain was still in")
