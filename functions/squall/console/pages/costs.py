"""The costs page. (Skeleton: built by its own change.)"""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("costs", __name__, url_prefix="/costs")


@blueprint.get("")
def page() -> str:
    return render_template("costs.html")
