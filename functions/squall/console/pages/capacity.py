"""The capacity page. (Skeleton: built by its own change.)"""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("capacity", __name__, url_prefix="/capacity")


@blueprint.get("")
def page() -> str:
    return render_template("capacity.html")
