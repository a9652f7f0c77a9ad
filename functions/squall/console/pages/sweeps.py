"""The sweeps page. (Skeleton: built by its own change.)"""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("sweeps", __name__, url_prefix="/sweeps")


@blueprint.get("")
def page() -> str:
    return render_template("sweeps.html")


@blueprint.get("/<sweep_id>")
def sweep(sweep_id: str) -> str:
    return render_template("sweeps.html")
