"""The console's Flask app: its pages, the guard in front of them and the headers after them."""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, redirect, render_template, request
from werkzeug.exceptions import HTTPException

from squall.cli.errors import CommandError
from squall.console.context import EXTENSION, ConsoleContext
from squall.console.guard import COOKIE, TOKEN_FIELD, Guard
from squall.console.pages import BLUEPRINTS, NAVIGATION
from squall.core.errors import SquallError

# Scripts and styles only from the console's own files: a job-supplied string that slipped
# past escaping still could not run (no inline script, no inline style, no other origin).
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)


def create_app(context: ConsoleContext, *, port: int) -> Flask:
    """The console over `context.client`, answering only on 127.0.0.1:`port` with `context.token`."""
    app = Flask(__name__)
    app.extensions[EXTENSION] = context
    guard = Guard(token=context.token, port=port)
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    app.jinja_env.filters["dict_without"] = lambda values, key: {k: v for k, v in values.items() if k != key}

    @app.before_request
    def check() -> Any:
        refusal = guard.refusal(
            method=request.method,
            host=request.host,
            cookie=request.cookies.get(COOKIE),
            origin=request.headers.get("Origin"),
            referer=request.headers.get("Referer"),
            fetch_site=request.headers.get("Sec-Fetch-Site"),
            form_token=request.form.get(TOKEN_FIELD) if request.method == "POST" else None,
            query_token=request.args.get("token"),
        )
        if refusal is not None:
            return render_template("refused.html", reason=refusal.reason), refusal.status
        if request.args.get("token") is not None:
            # The printed URL: keep the token in a cookie and take it out of the address bar.
            rest = request.args.to_dict(flat=False)
            rest.pop("token")
            target = request.path + ("?" + _query(rest) if rest else "")
            response = redirect(target, code=303)
            response.set_cookie(COOKIE, context.token, httponly=True, samesite="Strict", path="/")
            return response
        return None

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
        return response

    @app.context_processor
    def common() -> dict[str, Any]:
        return {
            "csrf_field": TOKEN_FIELD,
            "csrf_token": context.token,
            "allow_actions": context.allow_actions,
            "navigation": NAVIGATION,
        }

    @app.errorhandler(CommandError)
    def refused(exc: CommandError) -> tuple[str, int]:
        # A job or service that is not there, a refused input: the command's own words.
        status = 404 if exc.__class__.__name__ == "NotFound" else 400
        return render_template("error.html", message=str(exc), status=status), status

    @app.errorhandler(SquallError)
    def failed(exc: SquallError) -> tuple[str, int]:
        # The table, queue or bucket failing, as its adapter translated it.
        return render_template("error.html", message=str(exc), status=502), 502

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[str, int]:
        status = exc.code or 500
        return render_template("error.html", message=exc.description or exc.name, status=status), status

    return app


def _query(args: dict[str, list[str]]) -> str:
    from urllib.parse import urlencode

    return urlencode([(key, value) for key, values in args.items() for value in values])
