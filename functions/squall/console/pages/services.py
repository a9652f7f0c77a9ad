"""The services page. (Skeleton: built by its own change.)"""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("services", __name__, url_prefix="/services")


@blueprint.get("")
def page() -> str:
    return render_template("services.html")


@blueprint.get("/serve")
def serve_form() -> str:
    return render_template("services.html")


@blueprint.get("/<name>")
def service(name: str) -> str:
    return render_template("services.html")
