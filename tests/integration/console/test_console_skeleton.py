"""Every page of the console answers over the local runtime, and only to its own session."""

from __future__ import annotations

import pytest

from tests.integration.console.conftest import ORIGIN, PORT, TOKEN, Console

PAGES = ("/queue", "/jobs", "/sweeps", "/capacity", "/costs", "/services")


@pytest.mark.parametrize("path", PAGES)
def test_each_page_answers_with_the_navigation_and_strict_headers(console: Console, path: str) -> None:
    response = console.browser.get(path)
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    for label in ("Queue", "Jobs", "Sweeps", "Capacity", "Costs", "Model services"):
        assert label in page
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"


def test_the_printed_url_sets_the_cookie_and_drops_the_token_from_the_address(console: Console) -> None:
    http = console.browser.http
    http.delete_cookie("squall_console", domain="127.0.0.1")
    assert http.get("/queue", base_url=ORIGIN).status_code == 401
    response = http.get(f"/queue?token={TOKEN}&team=a", base_url=ORIGIN)
    assert response.status_code == 303
    assert response.headers["Location"] == "/queue?team=a"
    assert (
        "HttpOnly" in response.headers["Set-Cookie"] and "SameSite=Strict" in response.headers["Set-Cookie"]
    )
    assert http.get("/queue", base_url=ORIGIN).status_code == 200


def test_another_host_or_origin_is_refused(console: Console) -> None:
    http = console.browser.http
    assert http.get("/queue", base_url=f"http://rebound.example:{PORT}").status_code == 400
    other = {"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"}
    assert http.get("/queue", base_url=ORIGIN, headers=other).status_code == 403
