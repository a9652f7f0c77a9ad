"""The console's guard (console/guard.py): which requests it answers, as pure rules."""

from __future__ import annotations

from typing import Any

import pytest

from squall.console import guard as guard_module
from squall.console.guard import Guard, Refusal, new_token

PORT = 8123
TOKEN = "the-session-token"
GUARD = Guard(token=TOKEN, port=PORT)
HOST = f"127.0.0.1:{PORT}"
ORIGIN = f"http://{HOST}"


def refusal(**given: Any) -> Refusal | None:
    request: dict[str, Any] = {"method": "GET", "host": HOST, "cookie": TOKEN} | given
    return GUARD.refusal(**request)


def post(**given: Any) -> Refusal | None:
    request: dict[str, Any] = {
        "method": "POST",
        "origin": ORIGIN,
        "fetch_site": "same-origin",
        "form_token": TOKEN,
    } | given
    return refusal(**request)


def status(result: Refusal | None) -> int | None:
    return None if result is None else result.status


# Hosts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}", f"LOCALHOST:{PORT}"]
)
def test_the_console_answers_on_each_loopback_name_of_its_own_port(host: str) -> None:
    assert refusal(host=host) is None


@pytest.mark.parametrize(
    "host",
    [
        None,
        "",
        "127.0.0.1",  # no port: not the console's address
        f"127.0.0.1:{PORT + 1}",
        f"rebound.example:{PORT}",  # a DNS name rebound to 127.0.0.1
        f"127.0.0.2:{PORT}",
        f"0.0.0.0:{PORT}",
        f"127.0.0.1:{PORT}.evil.example",
    ],
)
def test_any_other_host_is_refused_with_400_naming_the_console_address(host: str | None) -> None:
    result = refusal(host=host)
    assert result is not None and result.status == 400
    assert f"127.0.0.1:{PORT}" in result.reason


def test_the_host_is_checked_before_the_token() -> None:
    # A rebound name is told it is the wrong address, even with no token at all.
    assert status(refusal(host=f"rebound.example:{PORT}", cookie=None)) == 400


def test_hosts_and_origins_name_the_guard_port() -> None:
    assert GUARD.hosts() == {f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}"}
    assert GUARD.origins() == {f"http://127.0.0.1:{PORT}", f"http://localhost:{PORT}", f"http://[::1]:{PORT}"}


# Sec-Fetch-Site and Origin -----------------------------------------------------------------


@pytest.mark.parametrize("site", ["same-origin", "none", None])
def test_same_origin_typed_in_or_unsent_fetch_site_is_answered(site: str | None) -> None:
    assert refusal(fetch_site=site) is None


@pytest.mark.parametrize("site", ["same-site", "cross-site", "SAME-ORIGIN", ""])
def test_any_other_fetch_site_is_refused_with_403_even_with_the_cookie(site: str) -> None:
    # A page on another loopback port is same-site: the browser still sends the cookie.
    result = refusal(fetch_site=site)
    assert result is not None and result.status == 403


@pytest.mark.parametrize("origin", [ORIGIN, f"http://localhost:{PORT}", f"http://[::1]:{PORT}"])
def test_the_console_own_origin_is_answered(origin: str) -> None:
    assert refusal(origin=origin) is None


@pytest.mark.parametrize(
    "origin",
    [
        f"http://127.0.0.1:{PORT + 1}",
        f"https://127.0.0.1:{PORT}",
        "http://evil.example",
        "null",  # a sandboxed frame or a file: page
        f"{ORIGIN}/",
        "",
    ],
)
def test_another_origin_is_refused_with_403_on_get_and_post(origin: str) -> None:
    assert status(refusal(origin=origin)) == 403
    assert status(post(origin=origin)) == 403


# The session's token ---------------------------------------------------------------------


@pytest.mark.parametrize("cookie", [None, "", "wrong", TOKEN + "x", TOKEN[:-1], TOKEN.upper(), "é" * 5])
def test_a_missing_or_wrong_cookie_is_refused_with_401_saying_what_to_open(cookie: str | None) -> None:
    result = refusal(cookie=cookie)
    assert result is not None and result.status == 401
    assert "squall console" in result.reason


def test_the_printed_url_token_stands_for_the_cookie_on_a_get() -> None:
    assert refusal(cookie=None, query_token=TOKEN) is None
    assert refusal(method="HEAD", cookie=None, query_token=TOKEN) is None
    assert status(refusal(cookie=None, query_token="wrong")) == 401


def test_the_query_token_does_not_stand_for_the_cookie_on_a_post() -> None:
    # A link or auto-submitted form could carry ?token=...: only a safe method may use it.
    assert status(post(cookie=None, query_token=TOKEN)) == 401
    assert status(post(method="PUT", cookie=None, query_token=TOKEN, form_token=TOKEN)) == 401
    assert status(post(method="DELETE", cookie=None, query_token=TOKEN)) == 401


def test_a_safe_method_needs_no_origin_referer_or_form_token() -> None:
    for method in ("GET", "HEAD", "OPTIONS", "get"):
        assert refusal(method=method, origin=None, referer=None, form_token=None) is None


# A change (POST) -------------------------------------------------------------------------


def test_a_post_from_the_console_page_with_its_form_token_is_answered() -> None:
    assert post() is None
    assert post(method="post") is None


def test_a_post_without_the_form_token_or_with_a_wrong_one_is_refused() -> None:
    for form_token in (None, "", "wrong", TOKEN + " "):
        result = post(form_token=form_token)
        assert result is not None and result.status == 403 and "form token" in result.reason


def test_a_post_with_neither_origin_nor_referer_is_refused() -> None:
    result = post(origin=None, referer=None)
    assert result is not None and result.status == 403 and "Origin or Referer" in result.reason


def test_the_referer_stands_for_a_missing_origin() -> None:
    assert post(origin=None, referer=f"{ORIGIN}/jobs/gan-1/cancel") is None
    assert post(origin=None, referer=f"http://localhost:{PORT}/queue?team=a") is None


@pytest.mark.parametrize(
    "referer",
    [
        f"http://127.0.0.1:{PORT + 1}/attack.html",
        "http://evil.example/?u=http://127.0.0.1",
        f"https://127.0.0.1:{PORT}/jobs",
        "/jobs/gan-1/cancel",  # no scheme and host: says nothing of where it came from
        "127.0.0.1:8123/jobs",
        "not a url",
    ],
)
def test_a_post_whose_referer_names_another_origin_is_refused(referer: str) -> None:
    assert status(post(origin=None, referer=referer)) == 403


def test_an_origin_wins_over_a_referer() -> None:
    # A foreign Origin is refused whatever the Referer says.
    assert status(post(origin="http://evil.example", referer=f"{ORIGIN}/jobs")) == 403


def test_a_post_without_the_cookie_is_refused_even_with_the_form_token() -> None:
    assert status(post(cookie=None)) == 401


# Comparing tokens --------------------------------------------------------------------------


def test_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []

    def compare_digest(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return a == b

    monkeypatch.setattr(guard_module.hmac, "compare_digest", compare_digest)
    assert GUARD.token_matches(TOKEN) and not GUARD.token_matches("wrong")
    assert refusal() is None
    assert compared == [(TOKEN.encode(), TOKEN.encode()), (b"wrong", TOKEN.encode()), (TOKEN.encode(),) * 2]


def test_token_matches_takes_any_text_without_raising() -> None:
    # hmac.compare_digest refuses non-ASCII str: the guard compares bytes.
    assert not GUARD.token_matches(None)
    assert not GUARD.token_matches("ünïcödé")
    assert Guard(token="ünïcödé", port=PORT).token_matches("ünïcödé")


def test_new_tokens_are_long_url_safe_and_fresh() -> None:
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert len(token) >= 43  # 256 bits in URL-safe base64
        assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
