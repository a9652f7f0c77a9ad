"""EC2's prices (the PriceBook port) and where the last ones are kept (PriceRecords).

- Spot: ``ec2:DescribeSpotPriceHistory`` in the group's region, for Linux/UNIX, with start
  and end time now, so that EC2 answers the price in effect now in each availability
  zone. The price is the highest of the zones' latest: a group may launch in any of
  them, and a budget is better held to the dearer one.
- On-demand: the Price List API (``pricing:GetProducts``, answered in us-east-1 for every
  region) for the instance type in the region's code, Linux, shared tenancy, no
  pre-installed software, capacity status Used: the hourly USD price of its OnDemand
  terms (the highest, when more than one product matches).

Every call is bounded (pages and items per call, bytes per price list item, short timeouts
and one retry for the clients `in_session` makes) and every
botocore error leaves as a Squall error (adapters/aws/errors.py): RetryableError for
throttling and transport trouble, PermanentError for the rest (an access denied, an
instance type EC2 does not know). An answer that holds no usable price is None.

The snapshot is one item of the job table: ``pk=PRICES sk=LATEST``, its JSON in
``snapshot`` (core/prices.py PriceSnapshot.to_json).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.config import Config

from squall.adapters.aws import errors
from squall.adapters.aws.job_store import call_dynamodb, iso, read_item, to_item
from squall.core.errors import PermanentError
from squall.core.prices import (
    MAX_PRICE_PER_HOUR,
    PRICE_LIST_REGION,
    PriceSnapshot,
    snapshot_from_text,
    valid_price,
)
from squall.ports import PriceBook, PriceRecords

__all__ = ["DynamoPriceRecords", "Ec2PriceBook", "PriceBook", "PriceRecords"]

SPOT_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
# With start and end time now, EC2 answers one price per zone and product: a few dozen.
SPOT_PAGE_SIZE = 100
MAX_SPOT_PAGES = 5
# The filters match one product per instance type and region; a few more pages are noise.
PRICING_PAGE_SIZE = 100
MAX_PRICING_PAGES = 3
# One product's price list (its attributes and terms) is a few kilobytes.
MAX_PRICE_ITEM_BYTES = 256_000
PRICING_SERVICE_CODE = "AmazonEC2"
PRICES_KEY = {"pk": "PRICES", "sk": "LATEST"}
# A price that cannot be asked now must not hold up the scale check: short timeouts, one retry.
PRICE_CALLS = Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"})


class Ec2PriceBook:
    """The PriceBook over EC2's spot price history and the Price List API.

    `ec2_clients` maps a region to its EC2 client; `pricing` makes the Price List client
    (us-east-1): both are called only when a price is asked.
    """

    def __init__(
        self,
        ec2_clients: Callable[[str], Any],
        pricing: Callable[[], Any],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._ec2_clients = ec2_clients
        self._pricing = pricing
        self._clock = clock

    @classmethod
    def in_session(cls, session: Any) -> Ec2PriceBook:
        """The book over clients of its own from a boto3 session (PRICE_CALLS), made on the
        first price asked: EC2's in each region, the Price List API's in PRICE_LIST_REGION."""
        clients: dict[tuple[str, str], Any] = {}

        def client(service: str, region: str) -> Any:
            if (service, region) not in clients:
                clients[(service, region)] = session.client(service, region_name=region, config=PRICE_CALLS)
            return clients[(service, region)]

        return cls(lambda region: client("ec2", region), pricing=lambda: client("pricing", PRICE_LIST_REGION))

    def spot_price(self, *, region: str, instance_type: str, zones: Sequence[str] = ()) -> float | None:
        now = self._clock()
        params: dict[str, Any] = {
            "InstanceTypes": [instance_type],
            "ProductDescriptions": list(SPOT_PRODUCTS),
            "StartTime": now,
            "EndTime": now,
        }
        if zones:
            params["Filters"] = [{"Name": "availability-zone", "Values": list(zones)}]
        latest: dict[str, tuple[datetime | None, float]] = {}
        doing = f"read the spot price of {instance_type} in {region}"
        for record in _bounded(
            errors.pages(
                doing,
                self._ec2_clients(region),
                "describe_spot_price_history",
                page_size=SPOT_PAGE_SIZE,
                **params,
            ),
            key="SpotPriceHistory",
            limit=MAX_SPOT_PAGES,
        ):
            if not isinstance(record, Mapping) or record.get("InstanceType") != instance_type:
                continue
            zone = str(record.get("AvailabilityZone") or "")
            try:
                price = valid_price(record.get("SpotPrice"), what="SpotPrice")
            except ValueError:
                continue
            stamp = record.get("Timestamp")
            when = stamp if isinstance(stamp, datetime) else None
            seen = latest.get(zone)
            if seen is None or (when is not None and (seen[0] is None or when > seen[0])):
                latest[zone] = (when, price)
        prices = [price for _, price in latest.values() if price > 0]
        return max(prices) if prices else None

    def on_demand_price(self, *, region: str, instance_type: str) -> float | None:
        filters = {
            "instanceType": instance_type,
            "regionCode": region,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        }
        pages = errors.pages(
            f"read the on-demand price of {instance_type} in {region}",
            self._pricing(),
            "get_products",
            page_size=PRICING_PAGE_SIZE,
            ServiceCode=PRICING_SERVICE_CODE,
            FormatVersion="aws_v1",
            Filters=[{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in filters.items()],
        )
        prices = [
            price
            for item in _bounded(pages, key="PriceList", limit=MAX_PRICING_PAGES)
            for price in on_demand_prices(item)
        ]
        return max(prices) if prices else None


def on_demand_prices(item: object) -> list[float]:
    """The hourly USD prices of one Price List product's OnDemand terms (none when it has none)."""
    if isinstance(item, str):
        if len(item) > MAX_PRICE_ITEM_BYTES:
            return []
        try:
            item = json.loads(item)
        except ValueError:
            return []
    terms = _mapping(_mapping(item).get("terms")).get("OnDemand")
    found: list[float] = []
    for offer in _mapping(terms).values():
        for dimension in _mapping(_mapping(offer).get("priceDimensions")).values():
            dimension = _mapping(dimension)
            if str(dimension.get("unit", "")).lower() not in ("hrs", "hours", "hour"):
                continue
            try:
                price = valid_price(_mapping(dimension.get("pricePerUnit")).get("USD"), what="USD")
            except ValueError:
                continue
            if 0 < price < MAX_PRICE_PER_HOUR:
                found.append(price)
    return found


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _bounded(pages: Iterator[dict[str, Any]], *, key: str, limit: int) -> Iterator[Any]:
    """The items under `key` of the first `limit` pages: no request is sent for a later one."""
    for number, page in enumerate(pages, start=1):
        yield from page.get(key) or []
        if number >= limit:
            return


class DynamoPriceRecords:
    """PriceRecords in the job table: one item, written by the scale check, read by any function."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def load(self) -> PriceSnapshot | None:
        item = read_item("read the last prices", self._client, table=self._table, key=to_item(PRICES_KEY))
        if item is None:
            return None
        text = item.get("snapshot", {}).get("S")
        if not isinstance(text, str):
            raise PermanentError("the stored prices (pk=PRICES) have no snapshot text")
        try:
            return snapshot_from_text(text)
        except ValueError as exc:
            raise PermanentError(f"the stored prices (pk=PRICES) cannot be read: {exc}") from None

    def save(self, snapshot: PriceSnapshot) -> None:
        item = to_item(
            {
                **PRICES_KEY,
                "at": iso(snapshot.at),
                "snapshot": json.dumps(snapshot.to_json(), separators=(",", ":")),
            }
        )
        call_dynamodb("save the prices", lambda: self._client.put_item(TableName=self._table, Item=item))
