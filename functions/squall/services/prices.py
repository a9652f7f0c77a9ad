"""Node groups at their current prices: configured, or refreshed from EC2 (core/prices.py).

The scale check asks `refreshed`: when the last prices are due (an hour old, five minutes
after a refresh that failed somewhere, or missing a group's type) it asks the PriceBook
again, keeps the answers in the PriceRecords (a cold function finds them there) and
returns the groups at those prices, so that admission's budgets, the planner's packing
and the fleet's cost meter see one price. Reconcile, which records a starting job's rate,
asks `known`: the prices the scale check last kept, read again at most every five minutes
(at every call while none are kept yet), never EC2. A failed call or a store that cannot
be read or written is a warning: the groups keep the last known prices, or the configured
ones. A refresh stops at the first call that is throttled or cannot reach EC2, and after
REFRESH_BUDGET: the check goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aws_lambda_powertools import Logger

from squall.core import prices
from squall.core.errors import MAX_ERROR_TEXT, RetryableError, SquallError
from squall.core.prices import PriceKey, PriceSnapshot
from squall.core.telemetry import SERVICE
from squall.planner import NodeGroup
from squall.ports import Clock, PriceBook, PriceRecords

logger = Logger(service=SERVICE, child=True)

# How stale the prices a reader (reconcile) holds may be before it reads the stored ones again.
READ_INTERVAL = timedelta(minutes=5)
# The most a refresh may add to a scale check: prices not asked by then are asked at the retry.
REFRESH_BUDGET = timedelta(seconds=20)


@dataclass
class GroupPrices:
    """The groups' prices, kept between calls of a warm function (one per process)."""

    records: PriceRecords
    clock: Clock
    # None: this function never asks EC2 (it reads what the scale check kept)
    book: PriceBook | None = None
    _snapshot: PriceSnapshot | None = field(default=None, init=False)
    _read_at: datetime | None = field(default=None, init=False)
    # the last result, returned again while neither the groups nor the snapshot change
    _applied: tuple[Sequence[NodeGroup], PriceSnapshot | None, list[NodeGroup]] | None = field(
        default=None, init=False
    )

    def refreshed(self, groups: Sequence[NodeGroup]) -> list[NodeGroup]:
        """The groups at their prices now, asking EC2 first when the last prices are due."""
        keys = prices.wanted(groups)
        if not keys:
            return list(groups)
        now = self.clock.now()
        if self._read_at is None or prices.due(self._snapshot, keys, now=now):
            # Cold, or due by what this process holds: another environment may have refreshed.
            self._read(now)
        if self.book is not None and prices.due(self._snapshot, keys, now=now):
            self._refresh(self.book, keys, now)
        return self._priced(groups)

    def known(self, groups: Sequence[NodeGroup]) -> list[NodeGroup]:
        """The groups at the prices the scale check last kept (read again at most every
        READ_INTERVAL; at every call while none are kept yet)."""
        if not prices.wanted(groups):
            return list(groups)
        now = self.clock.now()
        if self._snapshot is None or self._read_at is None or now >= self._read_at + READ_INTERVAL:
            self._read(now)
        return self._priced(groups)

    def _read(self, now: datetime) -> None:
        self._read_at = now
        try:
            stored = self.records.load()
        except SquallError as exc:
            logger.warning("stored prices not read", error=str(exc)[:MAX_ERROR_TEXT])
            return
        if stored is not None and (self._snapshot is None or stored.at >= self._snapshot.at):
            self._snapshot = stored

    def _refresh(self, book: PriceBook, keys: dict[PriceKey, bool], now: datetime) -> None:
        on_demand: dict[PriceKey, float | None] = {}
        spot: dict[PriceKey, float | None] = {}
        failed: list[tuple[str, PriceKey]] = []
        # Throttled or unreachable, or out of time: the rest would fare no better now, and the
        # check must go on. What is not asked keeps its last price, asked again RETRY_INTERVAL later.
        deadline = self.clock.now() + REFRESH_BUDGET
        stopped = False
        for key, wants_spot in keys.items():
            region, instance_type = key
            for kind in ("on-demand", "spot") if wants_spot else ("on-demand",):
                if stopped or self.clock.now() >= deadline:
                    stopped = True
                    failed.append((kind, key))
                    continue
                try:
                    if kind == "spot":
                        spot[key] = book.spot_price(region=region, instance_type=instance_type)
                    else:
                        on_demand[key] = book.on_demand_price(region=region, instance_type=instance_type)
                except (SquallError, ValueError) as exc:
                    stopped = isinstance(exc, RetryableError)
                    failed.append((kind, key))
                    logger.warning(
                        "price not refreshed",
                        kind=kind,
                        region=region,
                        instance_type=instance_type,
                        error=str(exc)[:MAX_ERROR_TEXT],
                        rest_left_for_later=stopped,
                    )
        snapshot = prices.merged(self._snapshot, at=now, on_demand=on_demand, spot=spot, failed=failed)
        self._snapshot = snapshot
        logger.info(
            "prices refreshed",
            types=len(keys),
            failed=len(failed),
            on_demand={f"{r}/{t}": p for (r, t), p in snapshot.on_demand.items()},
            spot={f"{r}/{t}": p for (r, t), p in snapshot.spot.items()},
        )
        try:
            self.records.save(snapshot)
        except SquallError as exc:
            logger.warning("refreshed prices not stored", error=str(exc)[:MAX_ERROR_TEXT])

    def _priced(self, groups: Sequence[NodeGroup]) -> list[NodeGroup]:
        applied = self._applied
        if applied is not None and applied[0] is groups and applied[1] is self._snapshot:
            return applied[2]
        result = prices.priced(groups, self._snapshot)
        self._applied = (groups, self._snapshot, result)
        return result
