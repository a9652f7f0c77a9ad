"""Sites: where one gang lives, a region of one cluster. Pure.

With one cluster a site is just its region ("us-west-2"), so every plan, reason and
record reads as it did before clusters. With more than one, the planner reads each
cluster's objects qualified by its name (planner/kube.py), and a site is
"<cluster>/<region>": two clusters in one region are two sites, and a gang never
spans two of them. Services split a site back into its cluster and region.
"""

from __future__ import annotations


def site(region: str, cluster: str = "") -> str:
    """ "<cluster>/<region>", or just the region when there is no cluster to name."""
    return f"{cluster}/{region}" if cluster else region


def split_site(name: str) -> tuple[str, str]:
    """(cluster or "", region): the inverse of `site`."""
    cluster, _, region = name.rpartition("/")
    return cluster, region


def qualified(name: str, cluster: str | None) -> str:
    """An object's name as the planner knows it: "<cluster>/<name>" when read for a cluster."""
    return f"{cluster}/{name}" if cluster else name


def unqualified(name: str) -> tuple[str, str]:
    """(cluster or "", name): what `qualified` made of a node's name, back in its parts."""
    cluster, _, bare = name.partition("/")
    return (cluster, bare) if bare else ("", name)
