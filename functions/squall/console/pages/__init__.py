"""One blueprint per page; NAVIGATION is the bar every page shows, in order."""

from __future__ import annotations

from flask import Blueprint, redirect, url_for
from werkzeug.wrappers import Response

from squall.console.pages import capacity, costs, jobs, queue, services, sweeps

home = Blueprint("home", __name__)


@home.get("/")
def index() -> Response:
    return redirect(url_for("queue.page"))


BLUEPRINTS: tuple[Blueprint, ...] = (
    home,
    queue.blueprint,
    jobs.blueprint,
    sweeps.blueprint,
    capacity.blueprint,
    costs.blueprint,
    services.blueprint,
)

# (endpoint, label): the pages in the bar at the top of each page.
NAVIGATION: tuple[tuple[str, str], ...] = (
    ("queue.page", "Queue"),
    ("jobs.page", "Jobs"),
    ("sweeps.page", "Sweeps"),
    ("capacity.page", "Capacity"),
    ("costs.page", "Costs"),
    ("services.page", "Model services"),
)

__all__ = ["BLUEPRINTS", "NAVIGATION"]
