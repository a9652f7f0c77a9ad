"""Node group prices from EC2 (core/prices.py): the setting, which prices are asked, when, and
how they replace the configured ones."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from squall.core import prices
from squall.core.prices import PriceSnapshot
from squall.planner import NodeGroup
from squall.planner.inputs import GroupsError, read_node_groups
from tests.groups import gpu_group

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P3 = ("us-west-2", "p3.2xlarge")
G5 = ("us-west-2", "g5.12xlarge")


def _groups(*raw: dict[str, object]) -> list[NodeGroup]:
    return read_node_groups(list(raw))[0]


def _spot_and_on_demand(price_from: str = "ec2") -> list[NodeGroup]:
    return _groups(
        gpu_group("p3", "p3.2xlarge", max_size=4, pricePerHour=3.06, priceFrom=price_from),
        gpu_group(
            "g5-spot",
            "g5.12xlarge",
            max_size=4,
            spot=True,
            pricePerHour=2.0,
            onDemandPricePerHour=5.672,
            priceFrom=price_from,
        ),
    )


# ---- the setting ------------------------------------------------------------------------


def test_price_from_is_config_unless_a_group_says_ec2() -> None:
    plain, ec2 = _groups(
        gpu_group("a", "p3.2xlarge", max_size=1), gpu_group("b", "p3.2xlarge", max_size=1, priceFrom="ec2")
    )
    assert (plain.price_from, ec2.price_from) == ("config", "ec2")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("EC2", "nodeGroups[0].priceFrom: expected config or ec2, got 'EC2'"),
        ("pricing", "nodeGroups[0].priceFrom: expected config or ec2, got 'pricing'"),
        (True, "nodeGroups[0].priceFrom: expected a non-empty string, got true"),
    ],
)
def test_an_unknown_price_source_is_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(GroupsError) as caught:
        read_node_groups([gpu_group("a", "p3.2xlarge", max_size=1, priceFrom=value)])
    assert caught.value.errors == [message]


def test_a_node_group_refuses_an_unknown_price_source() -> None:
    (group,) = _groups(gpu_group("a", "p3.2xlarge", max_size=1))
    with pytest.raises(ValueError, match="price_from must be one of config, ec2"):
        dataclasses.replace(group, price_from="api")


# ---- which prices, and when -------------------------------------------------------------


def test_only_groups_with_price_from_ec2_want_prices_and_spot_groups_want_both() -> None:
    groups = [*_spot_and_on_demand(), *_groups(gpu_group("other", "p3.2xlarge", region="us-east-1", max_size=1))]
    assert prices.wanted(groups) == {P3: False, G5: True}
    assert prices.wanted(_spot_and_on_demand("config")) == {}


def test_an_on_demand_and_a_spot_group_of_one_type_share_its_key_and_ask_for_spot() -> None:
    groups = _groups(
        gpu_group("od", "g5.12xlarge", max_size=1, priceFrom="ec2"),
        gpu_group("spot", "g5.12xlarge", max_size=1, spot=True, priceFrom="ec2"),
    )
    assert prices.wanted(groups) == {G5: True}


def test_at_most_so_many_types_are_asked() -> None:
    (template,) = _groups(gpu_group("x", "p3.2xlarge", max_size=1, priceFrom="ec2"))
    many = [
        dataclasses.replace(template, name=f"g{i}", instance_type=f"t{i}.large")
        for i in range(prices.MAX_PRICED_TYPES + 5)
    ]
    asked = prices.wanted(many)
    assert len(asked) == prices.MAX_PRICED_TYPES
    assert list(asked)[:2] == [("us-west-2", "t0.large"), ("us-west-2", "t1.large")]


def test_prices_are_due_when_none_are_known_an_hour_later_or_sooner_after_a_failure() -> None:
    keys = {P3: False, G5: True}
    fresh = PriceSnapshot(at=NOW, on_demand={P3: 3.0, G5: 5.0}, spot={G5: 1.5})
    assert prices.due(None, keys, now=NOW)
    assert not prices.due(fresh, keys, now=NOW + timedelta(minutes=59))
    assert prices.due(fresh, keys, now=NOW + prices.REFRESH_INTERVAL)
    failed = PriceSnapshot(at=NOW, on_demand={P3: 3.0, G5: 5.0}, spot={G5: None}, failed=True)
    assert not prices.due(failed, keys, now=NOW + timedelta(minutes=4))
    assert prices.due(failed, keys, now=NOW + prices.RETRY_INTERVAL)
    assert not prices.due(None, {}, now=NOW)


def test_a_type_the_snapshot_never_asked_for_is_due_at_once() -> None:
    snapshot = PriceSnapshot(at=NOW, on_demand={P3: 3.0, G5: 5.0})
    assert not prices.due(snapshot, {P3: False, G5: False}, now=NOW)
    assert prices.due(snapshot, {P3: False, G5: True}, now=NOW)  # now a spot group of g5
    # EC2 listing no price is an answer: asked again an hour later, not every check
    unlisted = PriceSnapshot(at=NOW, on_demand={P3: None})
    assert not prices.due(unlisted, {P3: False}, now=NOW + timedelta(minutes=30))


def test_a_failed_call_keeps_the_price_asked_before() -> None:
    before = PriceSnapshot(at=NOW, on_demand={P3: 3.0, G5: 5.0}, spot={G5: 1.5})
    after = prices.merged(
        before,
        at=NOW + timedelta(hours=1),
        on_demand={P3: 3.1, G5: 5.2},
        spot={},
        failed=[("spot", G5)],
    )
    assert after == PriceSnapshot(
        at=NOW + timedelta(hours=1), on_demand={P3: 3.1, G5: 5.2}, spot={G5: 1.5}, failed=True
    )
    first = prices.merged(None, at=NOW, on_demand={}, spot={}, failed=[("on-demand", P3)])
    assert first.on_demand == {P3: None} and first.failed


# ---- prices on groups ---------------------------------------------------------------------


def test_a_spot_group_gets_the_spot_price_and_the_on_demand_price_for_its_savings() -> None:
    on_demand, spot = _spot_and_on_demand()
    snapshot = PriceSnapshot(at=NOW, on_demand={P3: 3.2, G5: 6.0}, spot={G5: 1.8})
    priced_on_demand, priced_spot = prices.priced([on_demand, spot], snapshot)
    assert (priced_on_demand.price_per_hour, priced_on_demand.on_demand_price_per_hour) == (3.2, None)
    assert (priced_spot.price_per_hour, priced_spot.on_demand_price_per_hour) == (1.8, 6.0)
    # everything else is the group as configured
    assert priced_spot.name == spot.name and priced_spot.spot and priced_spot.allocatable == spot.allocatable


def test_what_ec2_does_not_answer_is_the_configured_price() -> None:
    on_demand, spot = _spot_and_on_demand()
    snapshot = PriceSnapshot(at=NOW, on_demand={P3: None, G5: 6.0}, spot={G5: None})
    priced_on_demand, priced_spot = prices.priced([on_demand, spot], snapshot)
    assert priced_on_demand is on_demand
    assert (priced_spot.price_per_hour, priced_spot.on_demand_price_per_hour) == (2.0, 6.0)
    assert prices.priced([on_demand, spot], None) == [on_demand, spot]


def test_groups_that_keep_their_configured_prices_are_untouched() -> None:
    groups = _spot_and_on_demand("config")
    snapshot = PriceSnapshot(at=NOW, on_demand={P3: 9.0, G5: 9.0}, spot={G5: 9.0})
    assert all(a is b for a, b in zip(prices.priced(groups, snapshot), groups, strict=True))


# ---- the stored form ---------------------------------------------------------------------------


def test_a_snapshot_survives_its_stored_form() -> None:
    snapshot = PriceSnapshot(at=NOW, on_demand={P3: 3.06, G5: None}, spot={G5: 1.23}, failed=True)
    text = json.dumps(snapshot.to_json())
    assert prices.snapshot_from_text(text) == snapshot


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be an object"),
        ({"onDemand": {}}, "needs its time"),
        ({"at": "yesterday"}, "needs its time"),
        ({"at": "2026-03-01T12:00:00"}, "timezone-aware"),
        ({"at": NOW.isoformat(), "onDemand": {"p3.2xlarge": 3.0}}, "region/instance type"),
        ({"at": NOW.isoformat(), "spot": {"us-west-2/p3.2xlarge": "cheap"}}, "expected a price per hour"),
        ({"at": NOW.isoformat(), "spot": {"us-west-2/p3.2xlarge": -1}}, "expected a price per hour"),
        ({"at": NOW.isoformat(), "spot": {"us-west-2/p3.2xlarge": 1e9}}, "expected a price per hour"),
        ({"at": NOW.isoformat(), "spot": {"us-west-2/p3.2xlarge": True}}, "expected a price per hour"),
        ({"at": NOW.isoformat(), "spot": []}, "spot must be an object"),
    ],
)
def test_a_stored_snapshot_that_is_not_one_is_refused_saying_why(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prices.snapshot_from_text(json.dumps(data))


def test_a_stored_snapshot_is_read_only_up_to_a_bound() -> None:
    huge = json.dumps({"at": NOW.isoformat(), "spot": {f"us-west-2/t{i}": 1.0 for i in range(5000)}})
    with pytest.raises(ValueError, match="more than"):
        prices.snapshot_from_text(huge)
