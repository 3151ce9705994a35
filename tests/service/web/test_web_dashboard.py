"""The dashboard in a real browser (Debian's Chromium through Playwright) against a real
server (uvicorn on loopback, Ray, SQLite): every page loads with no console error; a
passkey job submitted through the form on a demo checkpoint runs to succeeded while the
list updates itself; its samples open with the needle marked; the leaderboard shows it
and the nightly curve; Compare charts two rows; a bad value shows the API's message next
to its field; with a token, cancel without it is refused and with it works. At 1400x1000
the job list shows above the fold, the jobs and checkpoints tables need no sideways scroll,
depth deciles sit on a 0..9 axis and Compare names what differs between two jobs (the
seed). Screenshots of each page are saved (LCTX_SCREENSHOTS=docs/screenshots refreshes the
guide's)."""

from __future__ import annotations

import shutil
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from service.schedules import ScheduleTicker
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint, wait_for, wait_job
from tests.service.web.browser import SCREENSHOTS, new_page, screenshot

pytestmark = pytest.mark.integration  # a browser, a server and Ray

REPO = Path(__file__).resolve().parents[3]
NIGHTLY = {"tasks": [{"name": "passkey", "lengths": [256, 512], "trials": 2}]}
PAGES = ["/", "/leaderboard", "/compare", "/checkpoints"]
SCREEN = {"width": 1400, "height": 1000}  # issue #39's desktop: what must fit without scrolling
# A run's checkpoint as training scripts name them: one long word, no break opportunity
LONG = "llama_3_1_8b_instruct_longctx_yarn_x4_lr3e_4_bs512_warmup2000_global_step_000120000"


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def world(ray_cluster: str, chromium, tmp_path_factory: pytest.TempPathFactory):
    """A served app with the demo softmax checkpoint, a nightly schedule whose watch folder
    holds three training steps (already run), and a job that failed."""
    tmp = tmp_path_factory.mktemp("dashboard")
    models = tmp / "models"
    shutil.copytree(REPO / "demo" / "checkpoints" / "softmax", models / "demo-softmax")
    for step, seed in ((100, 0), (200, 1), (300, 2)):
        tiny_checkpoint(models / "run" / f"step-{step}", seed=seed)
    shutil.copytree(REPO / "demo" / "checkpoints" / "softmax", models / "doomed")
    shutil.copytree(REPO / "demo" / "checkpoints" / "softmax", models / "runs" / LONG / LONG)
    settings = make_settings(tmp, executor=True, ray_address=ray_cluster, replica_id="dashboard-test")
    app = create_app(settings)
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        for name, path in (("demo-softmax", "demo-softmax"), ("doomed", "doomed"), (LONG, f"runs/{LONG}/{LONG}")):
            assert c.post("/v1/checkpoints", json={"name": name, "path": str(models / path)}).status_code == 201
        r = c.post("/v1/schedules", json={"name": "nightly", "cron": "0 2 * * *", "watch": [str(models / "run")],
                                          "suite": NIGHTLY})
        assert r.status_code == 201, r.text
        store = app.state.store
        nightly = ScheduleTicker(settings, store, on_submit=app.state.dispatcher.wake).tick(
            at=store.get_schedule("nightly").next_run_at)
        assert len(nightly) == 3
        (models / "doomed" / "model.safetensors").unlink()  # gone between registration and run
        failed = c.post("/v1/jobs", json={"checkpoint": "doomed", "tasks": [NIGHTLY["tasks"][0]]}).json()
        for job in [*nightly, failed]:
            wait_job(c, getattr(job, "id", None) or job["id"], timeout=120)
        yield srv.url, c, chromium, failed["id"]


def test_submit_a_passkey_job_through_the_form_and_follow_it_to_its_samples(world, shots: Path) -> None:
    url, c, b, _ = world
    page, console = new_page(b, url)
    page.goto("/")
    page.fill("#f-checkpoint", "demo-softmax")
    # lengths and trials fitted to the checkpoint's 256-token context, not 500-4000 x 100
    assert page.input_value("#opt-passkey-lengths") == "256,512"
    assert page.input_value("#opt-passkey-trials") == "20"
    assert page.input_value("#opt-needle-lengths") == "256,512"
    page.check("#task-passkey")
    page.fill("#opt-passkey-lengths", "256,512")
    page.fill("#opt-passkey-trials", "2")
    page.click("#submit-form button[type=submit]")
    link = page.locator("#form-message a")
    link.wait_for()
    job_id = link.inner_text()
    row = page.locator(f"#job-{job_id}")
    row.wait_for()  # the list picked the job up without a reload
    page.wait_for_function(f"document.querySelector('#job-{job_id}')?.dataset.status === 'succeeded'", timeout=120_000)
    assert row.locator(".count").inner_text() == "4/4"
    assert c.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    screenshot(page, shots, "jobs")

    page.click(f"#job-{job_id} a")
    page.wait_for_url(f"**/jobs/{job_id}")
    page.locator("#samples-table tbody tr").first.wait_for()
    assert page.locator("#samples-table tbody tr").count() == 4
    assert "accuracy (headline)" in page.locator("#job-results table").first.inner_text()
    assert page.locator("#job-results figure.chart svg").count() >= 1  # accuracy by length, by depth decile
    assert page.locator("#job-results figure.plot img").count() >= 1  # the evaluator's heatmap
    page.select_option("#filter-length", "512")
    assert page.locator("#samples-count").inner_text() == "2 of 4 samples"
    screenshot(page, shots, "job", full_page=True)
    page.locator("#samples-table tbody tr button").first.click()
    needle = page.locator("#sample-dialog mark.needle")
    needle.wait_for()
    records = [__import__("json").loads(x) for x in c.get(f"/v1/jobs/{job_id}/samples").text.splitlines()]
    shown = page.locator("#sample-title").inner_text().removeprefix("Sample ")
    record = next(r for r in records if str(r["id"]) == shown)
    # rows in sample order (length, depth, id), not completion order: the first 512 row is the shallowest
    first = min((r for r in records if r["length"] == 512), key=lambda r: (r["depth_decile"], str(r["id"])))
    assert record["length"] == 512 and record["id"] == first["id"]
    assert needle.inner_text() == f"The pass key is {record['key']}. Remember it. {record['key']} is the pass key."
    assert page.locator("#sample-references").inner_text() == str(record["key"])
    screenshot(page, shots, "sample")
    page.keyboard.press("Escape")

    page.goto("/leaderboard")
    board = page.locator("#board-passkey")
    board.wait_for()
    assert "demo-softmax" in board.inner_text() and job_id in board.inner_text()
    nightly = page.locator("figure.chart", has_text='Nightly "nightly"')
    assert nightly.count() == 1 and nightly.locator("svg .series path, svg .series circle, svg .series rect").count() >= 3
    board.locator("input.pick").nth(0).check()
    board.locator("input.pick").nth(1).check()
    screenshot(page, shots, "leaderboard", full_page=True)
    page.click("text=Compare selected")
    page.wait_for_url("**/compare?**")
    page.locator("figure.chart svg").first.wait_for()
    assert "length (tokens)" in page.locator("figure.chart").first.inner_text()
    assert "(baseline)" in page.locator("table.compare").inner_text()
    screenshot(page, shots, "compare", full_page=True)
    assert console.take() == []


def test_every_page_loads_without_console_errors(world, shots: Path) -> None:
    url, c, b, failed = world
    page, console = new_page(b, url)
    some_job = c.get("/v1/jobs", params={"status": "succeeded", "limit": 1}).json()["items"][0]["id"]
    for path in [*PAGES, f"/jobs/{some_job}", f"/jobs/{failed}"]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.locator("main h1").count() == 1, path
        assert "could not load" not in page.locator("main").inner_text(), path
        assert console.take() == [], path
    # the failed job: its error and what it left, with the raw JSON a click away
    assert "no weights" in page.locator("#job-results .error").first.inner_text()
    assert page.locator("#raw-results").get_attribute("href") == f"/v1/jobs/{failed}/results"
    page.goto("/checkpoints")
    page.locator("#schedules-table").wait_for()
    text = page.locator("#checkpoints-table").inner_text()
    assert "demo-softmax" in text and "softmax" in text and "lctx" in text  # name, variant, family
    # the latest results say under which setting they were made
    latest = page.locator("#checkpoints-table tbody tr", has_text="step-300").locator(".latest .setting")
    assert latest.inner_text() == "rope=checkpoint backend=auto"
    assert "step-300" in page.locator("#schedules-table").inner_text()  # the jobs the schedule submitted
    screenshot(page, shots, "checkpoints")
    # keyboard: the skip link is the first stop and every nav link is reachable
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    assert console.take() == []


def test_a_bad_value_shows_the_apis_message_next_to_its_field(world) -> None:
    url, c, b, _ = world
    page, console = new_page(b, url)
    page.goto("/")
    page.fill("#f-checkpoint", "demo-softmax")
    # lengths and trials fitted to the checkpoint's 256-token context, not 500-4000 x 100
    assert page.input_value("#opt-passkey-lengths") == "256,512"
    assert page.input_value("#opt-passkey-trials") == "20"
    assert page.input_value("#opt-needle-lengths") == "256,512"
    page.fill("#opt-passkey-lengths", "0")
    page.click("#submit-form button[type=submit]")
    error = page.locator("#opt-passkey-lengths-error")
    error.wait_for(state="visible")
    assert error.inner_text() == "Input should be greater than 0"
    assert page.get_attribute("#opt-passkey-lengths", "aria-invalid") == "true"
    page.fill("#opt-passkey-lengths", "256")
    page.fill("#f-checkpoint", "no-such-model")
    page.click("#submit-form button[type=submit]")
    page.locator("#f-checkpoint-error").wait_for(state="visible")
    assert "neither a registered name" in page.locator("#f-checkpoint-error").inner_text()
    assert page.locator("#opt-passkey-lengths-error").inner_text() == ""  # the earlier error is gone
    assert console.refusals(422) == []


def test_with_a_token_cancel_is_refused_without_it_and_works_with_it(chromium, tmp_path: Path, models: Path) -> None:
    settings = make_settings(tmp_path, api_token="s3cret")  # no executor: the job stays queued
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        auth = {"Authorization": "Bearer s3cret"}
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}, headers=auth).status_code == 201
        job = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "passkey"}]}, headers=auth).json()
        page, console = new_page(chromium, srv.url)
        page.goto("/")
        cancel = page.locator(f"#job-{job['id']} button.danger")
        cancel.click()
        page.locator("#token-dialog").wait_for()
        page.click("#token-skip")
        refused = page.locator("#jobs-message .error")
        refused.wait_for()
        assert "HTTP 401" in refused.inner_text() and "LCTX_API_TOKEN" in refused.inner_text()
        assert c.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"
        cancel.click()
        page.fill("#token-input", "s3cret")
        page.click("#token-ok")
        page.locator("#jobs-message .ok").wait_for()
        assert c.get(f"/v1/jobs/{job['id']}").json()["status"] == "cancelled"
        wait_for(lambda: page.locator(f"#job-{job['id']}").get_attribute("data-status") == "cancelled", 10,
                 what="the list to show the cancel")
        assert console.refusals(401) == []


def test_score_charts_keep_their_scale_in_the_browser(world) -> None:
    """A RULER curve (0-100) that is all zeros sits on a 0..100 axis, not one stretched around
    zero (-0.6..0.4 before); fractions sit on 0..1; other units follow their data."""
    url, _, b, _ = world
    page, console = new_page(b, url)
    page.goto("/")
    ticks = page.evaluate("""async () => {
      const m = await import('/ui/charts.js');
      const labels = (unit, ys) => [...m.lineChart({ title: 't', xLabel: 'length', yLabel: unit, yRange: m.unitRange(unit),
          series: [{ label: 's', points: ys.map((y, i) => ({ x: 1024 << i, y })) }] })
        .querySelectorAll('svg .grid text')].map((t) => t.textContent);
      return { ruler: labels('score (0-100)', [0, 0, 0]), fraction: labels('fraction', [0.5, 0.5]),
               ppl: labels('perplexity', [12, 30]) };
    }""")
    assert "0" in ticks["ruler"] and "100" in ticks["ruler"] and not any(t.startswith("-") for t in ticks["ruler"])
    assert "0" in ticks["fraction"] and "1" in ticks["fraction"]
    assert "100" not in ticks["ppl"]
    assert console.take() == []


def test_pull_a_checkpoint_from_the_checkpoints_page(world, shots: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard's pull action: a refusal shows the API's message; a hub repository from
    huggingface_hub's offline cache is pulled, registered and listed with its chat template
    and the commit it came from."""
    from tests.checkpoints.hf_models import COMMIT, REPO, build_hf_model, hub_cache, hub_offline

    model = tmp_path / "hf"
    build_hf_model(model)
    (model / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    hub_offline(monkeypatch, hub_cache(tmp_path / "hub", model))  # the server runs in this process
    url, c, b, _ = world
    page, console = new_page(b, url)
    page.goto("/checkpoints")
    page.locator("#pull-form").wait_for()
    page.fill("#pull-name", "pulled")
    page.fill("#pull-source", "lctx-test/absent")
    page.click("#pull-form button[type=submit]")
    page.locator("#pull-status .error").wait_for()
    assert "not in the hub cache" in page.locator("#pull-status").inner_text()
    page.fill("#pull-source", REPO)
    page.click("#pull-form button[type=submit]")
    page.locator("#checkpoints-table th:text('pulled')").wait_for()
    row = page.locator("#checkpoints-table tr", has=page.locator("th:text('pulled')")).inner_text()
    assert "chat_template.jinja" in row and f"hub {REPO}@main ({COMMIT[:10]})" in row
    screenshot(page, shots, "checkpoints-pull", full_page=True)
    assert console.refusals(422) == []
    assert c.delete("/v1/checkpoints/pulled").status_code == 204  # the other tests see the world as it was


@pytest.fixture(scope="module")
def seeds(world) -> list[str]:
    """Two passkey jobs on one checkpoint that differ only by seed (0, the default, and 1)."""
    _, c, _, _ = world
    spec = {"name": "passkey", "lengths": [256], "trials": 4}
    jobs = [c.post("/v1/jobs", json={"checkpoint": "demo-softmax", "tasks": [{**spec, "seed": seed}]}).json()["id"]
            for seed in (0, 1)]
    for job in jobs:
        assert wait_job(c, job, timeout=120)["status"] == "succeeded"
    return jobs


def test_the_job_list_shows_above_the_fold(world) -> None:
    """The submit form folds its option help away (a toggle shows it): at 1400x1000 the first
    job of the list is on screen (the form with its help was ~900 px tall)."""
    url, _, b, _ = world
    page, console = new_page(b, url, SCREEN)
    page.goto("/")
    first = page.locator("#jobs-table tbody tr").first
    first.wait_for()
    assert first.bounding_box()["y"] < SCREEN["height"]
    hint = page.locator("#opt-passkey-seed-hint")
    assert not hint.is_visible() and "seed of every sampled choice" in page.get_attribute("#opt-passkey-seed", "title")
    page.check("#show-help")
    assert hint.is_visible() and "seed of every sampled choice" in hint.inner_text()
    assert console.take() == []


def test_the_jobs_and_checkpoints_tables_fit_the_screen(world) -> None:
    """No sideways scrolling at 1400 px: progress details and long checkpoint names and paths
    wrap, and the jobs' duration and the checkpoints' latest results are on screen."""
    url, _, b, _ = world
    page, console = new_page(b, url, SCREEN)
    width = SCREEN["width"]

    def fits(table: str, last_cell: str) -> None:
        wrap = page.locator(table).locator("xpath=..")
        assert wrap.evaluate("e => e.scrollWidth <= e.clientWidth"), table
        for box in (page.locator(f"{table} tbody tr").nth(i).locator(last_cell).bounding_box()
                    for i in range(page.locator(f"{table} tbody tr").count())):
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, (table, box)
        assert page.evaluate("document.documentElement.scrollWidth") <= width

    page.goto("/")
    page.locator("#jobs-table tbody tr .count").first.wait_for()
    fits("#jobs-table", "td:nth-child(9)")  # duration
    assert page.locator("#jobs-table thead th").nth(8).inner_text() == "Duration"
    page.goto("/checkpoints")
    page.locator("#schedules-table").wait_for()
    assert LONG in page.locator("#checkpoints-table").inner_text()
    fits("#checkpoints-table", "td:last-child")  # latest results
    assert console.take() == []


DECILE_AXIS = """(figure) => {
  const ticks = [...figure.querySelectorAll('svg .grid text[text-anchor=middle]')]
    .map((t) => [t.textContent, Number(t.getAttribute('x'))]);
  const series = figure.querySelector('svg .series');
  return { ticks, marks: [...series.querySelectorAll('circle')].map((c) => [c.querySelector('title').textContent,
             Number(c.getAttribute('cx'))]),
           lines: [...series.querySelectorAll('polyline')].map((l) => l.getAttribute('points').split(' ')
             .map((p) => Number(p.split(',')[0]))) };
}"""


def deciles_on_their_axis(figure) -> list[int]:
    """The chart's x axis is 0..9, evenly spaced, each point sits at its decile's tick and no line
    runs across a decile with no samples: it leaves a gap. The deciles drawn."""
    axis = figure.evaluate(DECILE_AXIS)
    ticks = dict(axis["ticks"])
    assert list(ticks) == [str(d) for d in range(10)], ticks
    x = [ticks[str(d)] for d in range(10)]
    assert all(abs((x[d + 1] - x[d]) - (x[1] - x[0])) < 0.01 for d in range(9)), x
    drawn = []
    for title, cx in axis["marks"]:
        decile = int(title.split(": ")[1].split(" ")[0])
        assert abs(cx - x[decile]) < 0.01, (title, cx, x)
        drawn.append(decile)
    for line in axis["lines"]:
        steps = [round((b - a) / (x[1] - x[0]), 6) for a, b in pairwise(line)]
        assert steps == [1.0] * len(steps), (line, x)
    return drawn


def test_depth_deciles_sit_on_a_0_to_9_axis(world, seeds) -> None:
    """The depth-decile chart of a job and of a comparison: the deciles the samples missed leave
    gaps (the chart used to close up the ones it had, or spread 1..9 on a log scale)."""
    url, c, b, _ = world
    page, console = new_page(b, url, SCREEN)
    page.goto(f"/jobs/{seeds[0]}")
    chart = page.locator("#job-results figure.chart", has_text="by depth_decile")
    chart.wait_for()
    drawn = deciles_on_their_axis(chart)
    assert 0 < len(drawn) < 10  # 4 trials: some deciles are missing
    page.goto(f"/compare?task=passkey&jobs={seeds[0]}&jobs={seeds[1]}")
    chart = page.locator("figure.chart", has_text="by depth decile")
    chart.wait_for()
    assert deciles_on_their_axis(chart) == sorted(drawn)
    assert console.take() == []


def test_compare_names_what_differs_between_the_jobs(world, seeds) -> None:
    """Two jobs of one checkpoint that differ by seed: the headers, legend and Δ column name the
    seed (they named only the checkpoint, the same for both), and what both share is said once."""
    url, _, b, _ = world
    page, console = new_page(b, url, SCREEN)
    page.goto(f"/compare?task=passkey&jobs={seeds[0]}&jobs={seeds[1]}")
    table = page.locator("table.compare")
    table.wait_for()
    assert [t.strip() for t in table.locator("thead th").all_inner_texts()] == \
        ["Column", "seed=0 (baseline)", "seed=1", "Δ seed=1"]
    what = page.locator(".compare-what").first.inner_text()
    assert "differ in seed" in what and "demo-softmax" in what and "rope=checkpoint" in what
    legend = page.locator("figure.chart ul.legend").first.inner_text()
    assert "seed=0" in legend and "seed=1" in legend
    assert console.take() == []
