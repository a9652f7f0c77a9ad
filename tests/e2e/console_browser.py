"""Driving the console in a real browser: Debian's Chromium through its chromedriver.

Selenium is given both binaries (/usr/bin/chromium, /usr/bin/chromedriver, as the Makefile
installs them) and SE_OFFLINE, so selenium-manager never looks for, or downloads, a browser
or a driver. Also here: `squall console` run as a user runs it (its printed URL read from its
output), and a page of another origin on a loopback port (the attacker's), served by
http.server.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "out" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WINDOW = (1400, 900)
URL_LINE = re.compile(
    r"Squall console \((?P<mode>.*)\) at (?P<url>http://127\.0\.0\.1:(?P<port>\d+)/\?token=\S+)"
)


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed (the Makefile installs Debian's chromium and chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ModuleNotFoundError:
        return "selenium is not installed (the dev extra)"
    return None


@contextlib.contextmanager
def offline_selenium() -> Iterator[None]:
    """SE_OFFLINE=true while the driver starts: selenium-manager may fetch nothing."""
    before = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = before


@contextlib.contextmanager
def chromium(window: tuple[int, int] = WINDOW) -> Iterator[Any]:
    """A headless Chromium (a selenium WebDriver) that keeps the page's console messages."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # in a container, as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--window-size={window[0]},{window[1]}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with offline_selenium():
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """The browser console's errors since the last call (CSP violations and failed loads among them)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def screenshot(driver: Any, name: str) -> Path:
    """The whole page as out/console/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page_height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    viewport = int(driver.execute_script("return window.innerHeight"))
    if page_height > viewport:  # the whole page: the window grown by what its viewport lacks
        size = driver.get_window_size()
        driver.set_window_size(size["width"], min(size["height"] + page_height - viewport, 4000))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(*WINDOW)
    return path


def wait_for(what: Any, *, seconds: float, every: float = 0.5) -> Any:
    """What `what()` gives once it gives something truthy; the last thing it gave after `seconds`."""
    deadline = time.monotonic() + seconds
    found = what()
    while not found and time.monotonic() < deadline:
        time.sleep(every)
        found = what()
    return found


class ConsoleProcess:
    """`squall console --local --state-dir DIR --port 0 [...]` in a process of its own."""

    def __init__(self, state_dir: Path, *extra: str) -> None:
        self.command = [
            sys.executable,
            "-m",
            "squall.cli",
            "console",
            "--local",
            "--state-dir",
            str(state_dir),
            "--port",
            "0",
            *extra,
        ]
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.base_url = ""
        self.mode = ""
        self.stderr: list[str] = []

    def start(self, *, seconds: float = 60) -> ConsoleProcess:
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        found: list[re.Match[str]] = []
        assert self.process.stdout is not None and self.process.stderr is not None
        stdout, stderr = self.process.stdout, self.process.stderr

        def read_url() -> None:
            for line in stdout:
                match = URL_LINE.search(line)
                if match:
                    found.append(match)
                    return

        reader = threading.Thread(target=read_url, daemon=True)
        reader.start()
        threading.Thread(target=lambda: self.stderr.extend(stderr), daemon=True).start()
        reader.join(timeout=seconds)
        if not found:
            self.stop()
            raise AssertionError(f"`squall console` printed no URL: {''.join(self.stderr)[-2000:]}")
        self.url = found[0]["url"]
        self.mode = found[0]["mode"]
        self.base_url = f"http://127.0.0.1:{found[0]['port']}"
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> ConsoleProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OtherSite:
    """Pages of another origin, on a free loopback port: what a page open in the same browser sends."""

    def __init__(self, pages: Mapping[str, str]) -> None:
        pages = dict(pages)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path.split("?")[0])
                if body is None:
                    self.send_error(404)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtherSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


def attacker_pages(console: str, *, cancel_path: str, read_path: str) -> dict[str, str]:
    """Two pages another site could serve: one posts a form to the console's cancel route as soon
    as it loads; the other fetches a console page (with the browser's cookies) and shows what it got."""
    post = f"""<!doctype html><html><body>
<form id="f" method="post" action="{console}{cancel_path}"><input name="confirm" value="yes"></form>
<script>document.getElementById("f").submit();</script>
</body></html>"""
    read = f"""<!doctype html><html><head><title>reading</title></head><body><pre id="out">reading</pre>
<script>
const out = document.getElementById("out");
fetch("{console}{read_path}", {{credentials: "include"}})
  .then(r => r.text().then(t => {{ out.textContent = "GOT " + r.status + " " + t; document.title = "done"; }}))
  .catch(e => {{ out.textContent = "BLOCKED " + e; document.title = "done"; }});
fetch("{console}{read_path}", {{credentials: "include", mode: "no-cors"}})
  .then(r => r.text().then(t => {{ document.body.dataset.opaque = r.type + ":" + t.length; }}))
  .catch(e => {{ document.body.dataset.opaque = "error"; }});
</script></body></html>"""
    return {"/post.html": post, "/read.html": read}
