"""The console in a real browser (headless Chromium), against `squall local up` with a scenario running.

A user's session: `squall local up` (a GPU group of one 4-GPU node, a CPU group), four 4-GPU
jobs of two teams that hold their node until the test lets them go (so three queue behind the
first), a random sweep of three trials whose processes print squall-metric lines, the
quickstart's trainer run for a few steps (its SavedModel exported), and `squall console
--local --allow-actions` opened at the URL it printed. Each page loads with no error in the
browser's console (a Content-Security-Policy violation is one) and shows the scenario; a page
of another origin can neither cancel a job through the console nor read a page of it, while
the console's own confirmation page cancels one; a job is followed on its page to SUCCEEDED;
the sweep page draws a mark per trial and a trial's page charts its metrics; the trained
model is served through the console and answers a predict request sent from its page; and
the console without its token shows the refusal page. Every page is saved to
out/console/<page>.png.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from squall.cli import main
from squall.cli.client import Client
from squall.core.jobs import JobStatus
from squall.local import control
from tests.e2e.console_browser import (
    ConsoleProcess,
    OtherSite,
    attacker_pages,
    chromium,
    console_errors,
    missing_browser,
    screenshot,
    wait_for,
)
from tests.e2e.test_local_up import ROOT, Local, free_port, parse_exports

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser())),
]

SPEED = "30"
# Run for real by `squall local up` (its default --real-image): each pod is a local process.
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/squall/tf-trainer:1.0"
P3 = {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58}
M5 = {"cpu": "15890m", "memory": "57Gi", "pods": 58}
GPU_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
GROUPS = {
    "nodeGroups": [
        {"name": "p3-usw2", "region": "us-west-2", "asgName": "squall-p3-usw2", "instanceType": "p3.8xlarge",
         "allocatable": P3, "taints": GPU_TAINTS, "priority": 10, "minSize": 0, "maxSize": 1,
         "pricePerHour": 12.24},
        {"name": "m5-usw2", "region": "us-west-2", "asgName": "squall-m5-usw2", "instanceType": "m5.4xlarge",
         "allocatable": M5, "priority": 10, "minSize": 0, "maxSize": 2, "pricePerHour": 0.768},
    ],
}  # fmt: skip
# One 4-GPU node at most: the first job runs, the other three wait behind it.
BURSTS = {"burst-1": "research", "burst-2": "vision", "burst-3": "research", "burst-4": "vision"}
FOLLOWED = "burst-2"  # followed to SUCCEEDED on its page
TARGET = "burst-3"  # what the other site's form tries to cancel
CANCELLED = "burst-4"  # what the console's own confirmation page cancels
SWEEP_ID = "lr-sweep"
TRIALS = [f"{SWEEP_ID}-t00{n}" for n in range(3)]
# A trial: its score rises with the steps to a height set by its learning rate (best near 1e-3).
TRIAL_PROGRAM = """
import math, os, time
lr = float(os.environ["SQUALL_PARAM_LEARNING_RATE"])
quality = 0.2 + 0.75 * math.exp(-((math.log10(lr) + 3.0) ** 2) / 2)
for step in range(10, 101, 10):
    score = quality * (1 - math.exp(-step / 30))
    print(f"squall-metric step={step} train/loss={1 - score:.4f} eval/score={score:.4f}", flush=True)
    time.sleep(0.2)
"""
SWEEP = {
    "name": "lr-sweep",
    "id": SWEEP_ID,
    "team": "research",
    "image": IMAGE,
    "command": ["python", "-c", TRIAL_PROGRAM],
    "resources": {"cpu": "1", "memory": "1Gi"},
    "retries": 0,
    "sweep": {
        "strategy": "random",
        "seed": 7,
        "maxTrials": 3,
        "parallelism": 3,
        "parameters": {"learning_rate": {"min": 1e-5, "max": 1e-1, "log": True}},
        "objective": {"metric": "eval/score", "goal": "maximize"},
    },
}
# A model trained for real (the quickstart's example as one replica, a few steps), then served.
SERVED = "served-gan"
EXAMPLE = ROOT / "examples" / "local-distributed.yaml"
CODE = ROOT / "worker_images" / "tf_trainer"
LATENT_DIM = 8  # the example's --latent-dim: what the served model takes
PAGES = ("queue", "jobs", "job", "sweeps", "sweep", "capacity", "costs", "services")
NAVIGATION = ("Queue", "Jobs", "Sweeps", "Capacity", "Costs", "Model services")


def burst(job_id: str, team: str, release: Path) -> dict[str, Any]:
    """A 4-GPU job that holds its node until `release` exists."""
    program = (
        "import pathlib, time\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.2)\n"
        f"print('done {job_id}')\n"
    )
    return {"name": job_id, "id": job_id, "team": team, "image": IMAGE, "command": ["python", "-c", program],
            "resources": {"cpu": "2", "memory": "4Gi", "gpu": 4}, "retries": 0, "maxRuntime": "2h"}  # fmt: skip


@pytest.fixture
def local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Local]:
    """`squall local up` with the groups above, its environment exported in this process."""
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # this session's credentials, not a cached one's
    state = Local(tmp_path / "state", free_port())
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps(GROUPS))
    try:
        code = main(["local", "up", *state.args(), "--port", str(state.port), "--speed", SPEED,
                     "--groups", str(groups)])  # fmt: skip
        captured = capsys.readouterr()
        assert code == 0, captured.err
        for key, value in parse_exports(captured.out).items():
            monkeypatch.setenv(key, value)
        yield state
    finally:
        control.down(state_dir=state.state_dir, timeout=20)


def trainer(path: Path) -> Path:
    """The quickstart's example with one replica and the fewest steps (as tests/e2e/test_serve_predict.py)."""
    body = yaml.safe_load(EXAMPLE.read_text())
    args = list(body["args"])
    for flag, value in (("--steps", 4), ("--checkpoint-every", 2), ("--log-every", 2), ("--image-every", 4)):
        args[args.index(flag) + 1] = str(value)
    args[args.index("--eval-samples") + 1] = "16"
    assert args[args.index("--latent-dim") + 1] == str(LATENT_DIM)
    body = {key: value for key, value in body.items() if key != "replicas"}
    path.write_text(yaml.safe_dump(body | {"id": SERVED, "args": args, "retries": 0}))
    return path


def status_of(sdk: Client, job_id: str) -> JobStatus | None:
    """The job's state, or None before its record is written (a submission goes through the queue)."""
    job = sdk.find(job_id)
    return None if job is None else job.status


def open_page(driver: Any, url: str) -> str:
    """The page's text, after the console's errors of any earlier page were read and put aside."""
    console_errors(driver)
    driver.get(url)
    return str(driver.find_element("tag name", "body").text)


def test_the_console_in_a_browser_over_a_running_scenario(local: Local, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    release = tmp_path / "release"
    sdk = Client()
    for job_id, team in BURSTS.items():
        assert sdk.submit(burst(job_id, team, release)) == job_id
    assert sdk.submit(SWEEP) == SWEEP_ID
    assert main(["submit", str(trainer(tmp_path / "trainer.yaml")), "--code", str(CODE)]) == 0
    # the first burst holds the only GPU node; the others wait in the queue
    assert wait_for(lambda: status_of(sdk, "burst-1") is JobStatus.RUNNING, seconds=120)
    assert wait_for(
        lambda: {status_of(sdk, j) for j in BURSTS if j != "burst-1"} == {JobStatus.QUEUED}, seconds=60
    )

    with ConsoleProcess(local.state_dir, "--allow-actions") as console, chromium() as driver:
        assert console.mode.startswith("actions allowed")
        base = console.base_url
        # the printed URL: the token becomes a cookie and leaves the address bar
        open_page(driver, console.url)
        assert driver.current_url == f"{base}/queue"
        assert not console_errors(driver)

        urls = {
            "queue": f"{base}/queue",
            "jobs": f"{base}/jobs",
            "job": f"{base}/jobs/{FOLLOWED}",
            "sweeps": f"{base}/sweeps",
            "sweep": f"{base}/sweeps/{SWEEP_ID}",
            "capacity": f"{base}/capacity",
            "costs": f"{base}/costs",
            "services": f"{base}/services",
        }
        texts: dict[str, str] = {}
        for page in PAGES:
            text = open_page(driver, urls[page])
            errors = console_errors(driver)
            assert not errors, (page, errors)
            assert not driver.title.startswith(("Refused", "Error", "Not found")), (page, driver.title)
            for label in NAVIGATION:
                assert label in text, (page, label)
            texts[page] = text
            screenshot(driver, page)

        # the scenario's jobs: the three waiting behind the first, in the order they came
        queue = texts["queue"]
        waiting = [queue.index(job_id) for job_id in ("burst-2", "burst-3", "burst-4")]
        assert waiting == sorted(waiting)
        assert "vision" in queue and "research" in queue
        for job_id in BURSTS:
            assert job_id in texts["jobs"], job_id
        assert SWEEP_ID in texts["sweeps"]
        assert "us-west-2" in texts["capacity"] and "Waiting in the latest check" in texts["capacity"]
        assert f"Job {FOLLOWED}" in texts["job"] and "QUEUED" in texts["job"]

        # another site, open in the same browser, tries to cancel a queued job and to read a page
        cancel_path = f"/jobs/{TARGET}/cancel"
        with OtherSite(attacker_pages(base, cancel_path=cancel_path, read_path="/jobs")) as other:
            open_page(driver, f"{other.origin}/read.html")
            assert wait_for(lambda: driver.title == "done", seconds=30)
            got = driver.find_element(By.ID, "out").text
            assert got.startswith("BLOCKED"), got  # the fetch got nothing to read
            for job_id in BURSTS:
                assert job_id not in got
            opaque = wait_for(lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-opaque"),
                              seconds=30)  # fmt: skip
            assert opaque in ("opaque:0", "error"), opaque  # no-cors: an opaque, empty answer

            console_errors(driver)
            driver.get(f"{other.origin}/post.html")
            assert wait_for(lambda: driver.current_url.startswith(base), seconds=30), driver.current_url
            refused = str(driver.find_element(By.TAG_NAME, "body").text)
            assert driver.title.startswith("Refused") and "another site" in refused, refused
            screenshot(driver, "cross-origin-refused")
        assert sdk.get(TARGET).status is JobStatus.QUEUED  # not cancelled

        # the console's own confirmation page can cancel a job (so the refusal above is the guard's)
        open_page(driver, f"{base}/jobs/{CANCELLED}/cancel")
        assert CANCELLED in driver.title, driver.title
        screenshot(driver, "cancel-confirm")
        driver.find_element(By.CSS_SELECTOR, "form.action button[type=submit]").click()
        assert wait_for(lambda: driver.current_url.startswith(f"{base}/jobs/{CANCELLED}"), seconds=30)
        assert not console_errors(driver)
        assert wait_for(lambda: status_of(sdk, CANCELLED) is JobStatus.CANCELLED, seconds=120)

        # then the bursts are let go, one after another: the followed job's page comes to say SUCCEEDED
        release.write_text("go")

        def state_shown() -> str:
            open_page(driver, urls["job"])
            return str(driver.find_element(By.CSS_SELECTOR, "h1 span").text)

        assert wait_for(lambda: state_shown() == "SUCCEEDED", seconds=180, every=1.0)
        assert not console_errors(driver)
        assert "Completed" in str(driver.find_element(By.TAG_NAME, "body").text)
        screenshot(driver, "job-succeeded")
        assert wait_for(lambda: status_of(sdk, TARGET) is JobStatus.SUCCEEDED, seconds=180)
        # the ended bursts' money, per team (a job counts in the ledger once it has ended)

        def costs_of_both() -> str:
            text = open_page(driver, urls["costs"])
            return text if "vision" in text else ""

        costs = wait_for(costs_of_both, seconds=60)
        assert "research" in costs and "vision" in costs and "total" in costs, costs
        assert not console_errors(driver)
        screenshot(driver, "costs-done")

        # the sweep's trials report their scores: its page draws a mark for each
        def marks() -> list[Any]:
            if status_of(sdk, SWEEP_ID) is not JobStatus.SUCCEEDED:
                return []
            open_page(driver, urls["sweep"])
            found = driver.find_elements(
                By.CSS_SELECTOR, ".sweep-chart svg .trial-mark, .sweep-chart svg .trial-line"
            )
            return list(found) if len(found) == len(TRIALS) else []

        drawn = wait_for(marks, seconds=180, every=1.0)
        assert len(drawn) == len(TRIALS)
        assert not console_errors(driver)
        titles = {str(mark.find_element(By.TAG_NAME, "title").get_attribute("textContent")) for mark in drawn}
        assert {title.split(" ")[0] for title in titles} == set(TRIALS)
        assert any("(best)" in title for title in titles)
        screenshot(driver, "sweep-done")
        # a trial's page charts the metrics its process printed, and shows its output
        best = next(title.split(" ")[0] for title in titles if "(best)" in title)
        open_page(driver, f"{base}/jobs/{best}")
        assert not console_errors(driver)
        charted = {str(h.text) for h in driver.find_elements(By.CSS_SELECTOR, ".charts h3")}
        assert {"eval/score", "train/loss"} <= charted, charted
        assert driver.find_elements(By.CSS_SELECTOR, ".charts svg polyline")
        assert "squall-metric step=100" in str(driver.find_element(By.ID, "logs").text)
        screenshot(driver, "trial")
        # and the sweeps list shows it, as every sweep, and among the succeeded ones
        for listed in (f"{base}/sweeps", f"{base}/sweeps?state=SUCCEEDED"):
            assert SWEEP_ID in open_page(driver, listed), listed
            assert not console_errors(driver)

        # the trained model: served through the console's confirmation, then asked for a prediction
        assert wait_for(lambda: status_of(sdk, SERVED) is JobStatus.SUCCEEDED, seconds=300), status_of(
            sdk, SERVED
        )
        open_page(driver, f"{base}/services/serve?job={SERVED}")
        assert not console_errors(driver)
        screenshot(driver, "serve-confirm")
        driver.find_element(By.CSS_SELECTOR, "form.service-serve button[type=submit]").click()

        def serving() -> bool:
            text = open_page(driver, f"{base}/services/{SERVED}")
            return "SERVING" in text and "no endpoints yet" not in text

        assert wait_for(serving, seconds=300, every=2.0)
        assert not console_errors(driver)
        box = driver.find_element(By.ID, "instances")
        box.clear()
        box.send_keys(json.dumps([[0.1] * LATENT_DIM, [-0.2] * LATENT_DIM]))
        driver.find_element(By.CSS_SELECTOR, "form.service-predict button[type=submit]").click()
        answer = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "pre.service-answer"), seconds=60)
        assert answer and "predictions" in answer[0].text, driver.find_element(By.TAG_NAME, "body").text
        assert not console_errors(driver)
        screenshot(driver, "service")
        listed = open_page(driver, urls["services"])
        assert SERVED in listed and "SERVING" in listed
        assert not console_errors(driver)
        screenshot(driver, "services-serving")

    # without the token: the refusal page (a fresh browser, no cookie)
    with ConsoleProcess(local.state_dir) as console, chromium() as driver:
        text = open_page(driver, f"{console.base_url}/queue")
        assert driver.title.startswith("Refused") and "session token" in text, text
        for job_id in BURSTS:
            assert job_id not in driver.page_source
        screenshot(driver, "refused")
