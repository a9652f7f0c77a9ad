"""The jobs page. (Skeleton: built by its own change.)"""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("jobs", __name__, url_prefix="/jobs")


@blueprint.get("")
def page() -> str:
    return render_template("jobs.html")


@blueprint.get("/<job_id>")
def job(job_id: str) -> str:
    return render_template("jobs.html")
