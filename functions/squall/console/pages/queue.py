"""The queue page. (Skeleton: built by its own change.)"""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("queue", __name__, url_prefix="/queue")


@blueprint.get("")
def page() -> str:
    return render_template("queue.html")
