"""Which requests the console answers: pure rules, no Flask.

The console listens on a loopback port, and another page open in the same browser can still
send requests to that port: a form posted from http://127.0.0.1:9999 to the console is
*same-site* (sites ignore ports), so SameSite cookies alone do not stop it, and a DNS name
rebound to 127.0.0.1 reaches it with a foreign Host. So every request must

- name the console's own host (127.0.0.1, localhost or [::1] on its port);
- carry the session's token, in the cookie set when the printed URL was opened;
- come from the console's own pages: a browser's Sec-Fetch-Site, where sent, is
  `same-origin` (or `none`: typed in the address bar), and an Origin header, where sent,
  is the console's own;

and a request that changes anything (POST) must also name the console's origin in Origin
(or Referer) and carry the token in its form, as the console's own forms do.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

COOKIE = "squall_console"
TOKEN_FIELD = "csrf"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def new_token() -> str:
    """A session token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Refusal:
    status: int  # 400 bad host, 401 no or wrong token, 403 another origin
    reason: str


@dataclass(frozen=True)
class Guard:
    token: str
    port: int

    def hosts(self) -> frozenset[str]:
        return frozenset(f"{name}:{self.port}" for name in LOOPBACK_NAMES)

    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts())

    def token_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def refusal(
        self,
        *,
        method: str,
        host: str | None,
        cookie: str | None,
        origin: str | None = None,
        referer: str | None = None,
        fetch_site: str | None = None,
        form_token: str | None = None,
        query_token: str | None = None,
    ) -> Refusal | None:
        """Why this request is refused, or None to answer it.

        `query_token` is the token of the printed URL (?token=...): it stands for the cookie
        on a GET typed in or opened from the terminal, and the app then sets the cookie.
        """
        if (host or "").lower() not in self.hosts():
            return Refusal(400, f"the console answers only on its own address (127.0.0.1:{self.port})")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return Refusal(403, f"a request from another site or origin ({fetch_site}) is refused")
        if origin is not None and origin not in self.origins():
            return Refusal(403, "a request from another origin is refused")
        safe = method.upper() in SAFE_METHODS
        if not (self.token_matches(cookie) or (safe and self.token_matches(query_token))):
            return Refusal(401, "this console needs its session token: open the URL `squall console` printed")
        if safe:
            return None
        sender = origin if origin is not None else _origin_of(referer)
        if sender not in self.origins():
            return Refusal(
                403, "a change must come from the console's own page (no matching Origin or Referer)"
            )
        if not self.token_matches(form_token):
            return Refusal(403, "a change must carry the console's form token")
        return None


def _origin_of(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"
