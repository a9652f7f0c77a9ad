"""The local runtime's prices: no network. The PriceBook answers the configured prices
(a test may set others, or tell it to fail next); the PriceRecords live in memory."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall.core.errors import RetryableError, SquallError
from squall.core.prices import PriceKey, PriceSnapshot
from squall.planner import NodeGroup
from squall.planner.inputs import read_node_groups


@dataclass
class LocalPriceBook:
    """A PriceBook of set prices: `of(groups)` sets the configured ones (a spot group's
    price is its type's spot price, an on-demand group's or a spot group's on-demand price
    its type's on-demand price). Records every call; `next_error` fails the next one."""

    spot: dict[PriceKey, float] = field(default_factory=dict)
    on_demand: dict[PriceKey, float] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    next_error: SquallError | None = None

    @classmethod
    def of(cls, groups: Iterable[NodeGroup]) -> LocalPriceBook:
        book = cls()
        for group in groups:
            key = (group.region, group.instance_type)
            if group.spot and group.price_per_hour is not None:
                book.spot.setdefault(key, group.price_per_hour)
            full = group.on_demand_price_per_hour if group.spot else group.price_per_hour
            if full is not None:
                book.on_demand.setdefault(key, full)
        return book

    def spot_price(self, *, region: str, instance_type: str, zones: Sequence[str] = ()) -> float | None:
        self._called("spot", region, instance_type)
        return self.spot.get((region, instance_type))

    def on_demand_price(self, *, region: str, instance_type: str) -> float | None:
        self._called("on-demand", region, instance_type)
        return self.on_demand.get((region, instance_type))

    def _called(self, kind: str, region: str, instance_type: str) -> None:
        self.calls.append((kind, region, instance_type))
        error, self.next_error = self.next_error, None
        if error is not None:
            raise error


@dataclass
class InMemoryPriceRecords:
    """PriceRecords in memory; `unavailable` makes every call fail (RetryableError)."""

    snapshot: PriceSnapshot | None = None
    saves: int = 0
    unavailable: bool = False

    def load(self) -> PriceSnapshot | None:
        self._check()
        return self.snapshot

    def save(self, snapshot: PriceSnapshot) -> None:
        self._check()
        self.snapshot = snapshot
        self.saves += 1

    def _check(self) -> None:
        if self.unavailable:
            raise RetryableError("the price records cannot be reached (simulated)")


def local_price_book(node_groups: Sequence[Mapping[str, Any]]) -> LocalPriceBook:
    """The local runtime's PriceBook: the configured groups' prices (none without groups)."""
    return LocalPriceBook.of(read_node_groups(list(node_groups))[0]) if node_groups else LocalPriceBook()
