"""Node group prices refreshed from EC2's price APIs: which prices to ask, when, and how
they replace the configured ones. Pure: no I/O, time is passed in.

A group with ``priceFrom: ec2`` (NodeGroup.price_from) has its prices asked of EC2 for
its region and instance type: a spot group gets the spot price as its price per hour and
the on-demand price as its on-demand price (spot savings are counted against it); an
on-demand group gets the on-demand price as its price per hour. Where EC2 has no answer
for a price (none listed, or the call failed and no earlier answer is known) the
configured price stands. Other groups keep their configured prices.

The answers are kept in a `PriceSnapshot` with the time they were asked: a new one is
due an hour later (five minutes later when some call failed), or at once when a group
asks for a price the snapshot never asked for.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from squall.planner import NodeGroup

# Where the Price List API (pricing:GetProducts) answers, for every region's prices.
PRICE_LIST_REGION = "us-east-1"
REFRESH_INTERVAL = timedelta(hours=1)
# After a refresh in which some call failed (throttled, denied, unreachable): try again sooner.
RETRY_INTERVAL = timedelta(minutes=5)
# A refresh asks at most this many (region, instance type) pairs (two calls each for spot
# groups); more configured pairs than that keep their configured prices.
MAX_PRICED_TYPES = 50
# Any real instance costs less than this per hour: an answer above it is no price.
MAX_PRICE_PER_HOUR = 10_000.0
# A snapshot as stored is small; anything larger was not written by Squall.
MAX_SNAPSHOT_BYTES = 64_000

# (region, instance type)
PriceKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PriceSnapshot:
    """EC2's prices as last asked, per (region, instance type), in dollars per instance-hour.

    A key present with None was asked and EC2 listed no price for it. `failed`: some call
    of the refresh at `at` failed (its key keeps the price an earlier snapshot had, if any).
    """

    at: datetime
    on_demand: Mapping[PriceKey, float | None] = field(default_factory=dict)
    spot: Mapping[PriceKey, float | None] = field(default_factory=dict)
    failed: bool = False

    def __post_init__(self) -> None:
        if self.at.utcoffset() is None:
            raise ValueError(f"a price snapshot's time must be timezone-aware, got {self.at.isoformat()}")

    def to_json(self) -> dict[str, Any]:
        """The stored form: keys as "region/instance type"."""
        return {
            "at": self.at.isoformat(),
            "onDemand": {f"{r}/{t}": p for (r, t), p in sorted(self.on_demand.items())},
            "spot": {f"{r}/{t}": p for (r, t), p in sorted(self.spot.items())},
            "failed": self.failed,
        }

    @classmethod
    def from_json(cls, data: object) -> PriceSnapshot:
        """The snapshot `to_json` wrote; ValueError names what is wrong with anything else."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a price snapshot must be an object, got {type(data).__name__}")
        try:
            at = datetime.fromisoformat(str(data["at"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"a price snapshot needs its time (at): {exc}") from None
        return cls(
            at=at,
            on_demand=_prices(data.get("onDemand"), "onDemand"),
            spot=_prices(data.get("spot"), "spot"),
            failed=data.get("failed") is True,
        )


def _prices(value: object, what: str) -> dict[PriceKey, float | None]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"a price snapshot's {what} must be an object")
    found: dict[PriceKey, float | None] = {}
    for key, price in value.items():
        region, slash, instance_type = str(key).partition("/")
        if not slash or not region or not instance_type:
            raise ValueError(f"a price snapshot's {what} key must be region/instance type, got {str(key)[:100]!r}")
        found[(region, instance_type)] = None if price is None else valid_price(price, what=f"{what} {key}")
    return found


def valid_price(value: object, *, what: str) -> float:
    """A price in dollars per hour, as a finite non-negative number below MAX_PRICE_PER_HOUR."""
    try:
        price = float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else math.nan
    except ValueError:
        price = math.nan
    if not (math.isfinite(price) and 0 <= price < MAX_PRICE_PER_HOUR):
        raise ValueError(f"{what}: expected a price per hour, got {str(value)[:100]!r}")
    return price


def snapshot_from_text(text: str) -> PriceSnapshot:
    """A stored snapshot from its JSON text (bounded); ValueError when it is not one."""
    if len(text) > MAX_SNAPSHOT_BYTES:
        raise ValueError(f"a stored price snapshot is {len(text)} bytes, more than {MAX_SNAPSHOT_BYTES}")
    return PriceSnapshot.from_json(json.loads(text))


def wanted(groups: Iterable[NodeGroup]) -> dict[PriceKey, bool]:
    """The (region, instance type) pairs whose prices groups with priceFrom ec2 want, and
    whether a spot group wants its spot price; at most MAX_PRICED_TYPES, in order."""
    keys: dict[PriceKey, bool] = {}
    for group in groups:
        if group.price_from != "ec2":
            continue
        key = (group.region, group.instance_type)
        if key in keys or len(keys) < MAX_PRICED_TYPES:
            keys[key] = keys.get(key, False) or group.spot
    return keys


def due(snapshot: PriceSnapshot | None, keys: Mapping[PriceKey, bool], *, now: datetime) -> bool:
    """Whether these prices should be asked again now."""
    if not keys:
        return False
    if snapshot is None:
        return True
    if any(key not in snapshot.on_demand or (spot and key not in snapshot.spot) for key, spot in keys.items()):
        return True
    return now >= snapshot.at + (RETRY_INTERVAL if snapshot.failed else REFRESH_INTERVAL)


def merged(
    previous: PriceSnapshot | None,
    *,
    at: datetime,
    on_demand: Mapping[PriceKey, float | None],
    spot: Mapping[PriceKey, float | None],
    failed: Sequence[tuple[str, PriceKey]],
) -> PriceSnapshot:
    """A refresh's snapshot: its answers; for a (kind, key) whose call failed, the previous price."""
    new_on_demand = dict(on_demand)
    new_spot = dict(spot)
    for kind, key in failed:
        source, target = (
            (previous.on_demand if previous else {}, new_on_demand)
            if kind == "on-demand"
            else (previous.spot if previous else {}, new_spot)
        )
        target[key] = source.get(key)
    return PriceSnapshot(at=at, on_demand=new_on_demand, spot=new_spot, failed=bool(failed))


def priced(groups: Sequence[NodeGroup], snapshot: PriceSnapshot | None) -> list[NodeGroup]:
    """The groups at the snapshot's prices (module docstring); a group whose prices do not
    change is the same object."""
    if snapshot is None:
        return list(groups)
    return [_priced(group, snapshot) for group in groups]


def _priced(group: NodeGroup, snapshot: PriceSnapshot) -> NodeGroup:
    if group.price_from != "ec2":
        return group
    key = (group.region, group.instance_type)
    on_demand = snapshot.on_demand.get(key)
    if group.spot:
        spot = snapshot.spot.get(key)
        price = spot if spot is not None else group.price_per_hour
        full = on_demand if on_demand is not None else group.on_demand_price_per_hour
    else:
        price = on_demand if on_demand is not None else group.price_per_hour
        full = group.on_demand_price_per_hour
    if price == group.price_per_hour and full == group.on_demand_price_per_hour:
        return group
    return dataclasses.replace(group, price_per_hour=price, on_demand_price_per_hour=full)
