"""adapters/aws/prices.py: EC2's spot and on-demand prices (moto and botocore's Stubber), the
stored snapshot (DynamoDB on moto), bounds, and errors that leave as Squall's only."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from squall.adapters.aws.prices import (
    MAX_PRICING_PAGES,
    MAX_SPOT_PAGES,
    PRICE_CALLS,
    PRICING_PAGE_SIZE,
    SPOT_PAGE_SIZE,
    DynamoPriceRecords,
    Ec2PriceBook,
    on_demand_prices,
)
from squall.core.errors import PermanentError, RetryableError, SquallError
from squall.core.prices import PriceSnapshot

from .test_adapter_errors import ANSWERS, BOTOCORE

pytestmark = pytest.mark.timeout(60)

REGION = "us-west-2"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P4D = "p4d.24xlarge"
ANY_PARAMS = None  # Stubber: the request is not checked


def _client(service: str, region: str = REGION) -> Any:
    return boto3.client(service, region_name=region, aws_access_key_id="testing", aws_secret_access_key="testing")


def _book(ec2: Any = None, pricing: Any = None) -> Ec2PriceBook:
    return Ec2PriceBook(lambda _region: ec2, pricing=lambda: pricing, clock=lambda: NOW)


def _spot(zone: str, price: str, at: datetime, instance_type: str = P4D) -> dict[str, Any]:
    return {
        "AvailabilityZone": zone,
        "InstanceType": instance_type,
        "ProductDescription": "Linux/UNIX",
        "SpotPrice": price,
        "Timestamp": at,
    }


def _spot_request(**extra: Any) -> dict[str, Any]:
    return {
        "InstanceTypes": [P4D],
        "ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
        "StartTime": NOW,
        "EndTime": NOW,
        "MaxResults": SPOT_PAGE_SIZE,
        **extra,
    }


def _product(usd: str, *, unit: str = "Hrs") -> str:
    """One Price List item, as GetProducts answers it: a JSON document in a string."""
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": P4D, "regionCode": REGION, "operatingSystem": "Linux"}},
            "terms": {
                "OnDemand": {
                    "OFFER.JRTCKXETXF": {
                        "priceDimensions": {
                            "OFFER.JRTCKXETXF.6YS6EN2CT7": {"unit": unit, "pricePerUnit": {"USD": usd}}
                        }
                    }
                },
                "Reserved": {
                    "OFFER.4NA7Y494T4": {
                        "priceDimensions": {"OFFER.4NA7Y494T4.X": {"unit": "Hrs", "pricePerUnit": {"USD": "1.0"}}}
                    }
                },
            },
        }
    )


# ---- spot --------------------------------------------------------------------------------------


def test_a_spot_price_from_moto(aws_credentials: None) -> None:
    # moto answers every zone of the region with one price for a type it knows, nothing for others
    with mock_aws():
        book = Ec2PriceBook(lambda region: _client("ec2", region), pricing=lambda: None)
        assert book.spot_price(region=REGION, instance_type="g5.12xlarge") == pytest.approx(0.00001)
        assert book.spot_price(region=REGION, instance_type="g5.12xlarge", zones=["us-west-2a"]) == pytest.approx(
            0.00001
        )
        assert book.spot_price(region=REGION, instance_type="zz9.nonexistent") is None


def test_the_spot_price_is_the_highest_of_the_zones_latest() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {
                "SpotPriceHistory": [
                    _spot("us-west-2a", "9.50", NOW - timedelta(hours=3)),  # older: replaced below
                    _spot("us-west-2a", "8.10", NOW - timedelta(minutes=5)),
                    _spot("us-west-2b", "8.40", NOW - timedelta(hours=2)),
                    _spot("us-west-2c", "bogus", NOW),  # no price: left out
                    _spot("us-west-2d", "99.0", NOW, instance_type="p5.48xlarge"),  # another type
                ]
            },
            _spot_request(Filters=[{"Name": "availability-zone", "Values": ["us-west-2a", "us-west-2b"]}]),
        )
        price = _book(ec2).spot_price(region=REGION, instance_type=P4D, zones=["us-west-2a", "us-west-2b"])
    assert price == pytest.approx(8.40)


def test_no_spot_price_listed_is_none() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": []}, _spot_request())
        assert _book(ec2).spot_price(region=REGION, instance_type=P4D) is None


def test_the_spot_history_is_read_only_so_many_pages() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        for page in range(MAX_SPOT_PAGES):
            stub.add_response(
                "describe_spot_price_history",
                {"SpotPriceHistory": [_spot(f"us-west-2{page}", f"{page + 1}.0", NOW)], "NextToken": f"t{page}"},
                _spot_request(**({"NextToken": f"t{page - 1}"} if page else {})),
            )
        # a request for a page after the bound would find no response queued and fail here
        price = _book(ec2).spot_price(region=REGION, instance_type=P4D)
        stub.assert_no_pending_responses()
    assert price == pytest.approx(float(MAX_SPOT_PAGES))


# ---- on-demand ---------------------------------------------------------------------------------


def _pricing_request(**extra: Any) -> dict[str, Any]:
    return {
        "ServiceCode": "AmazonEC2",
        "FormatVersion": "aws_v1",
        "Filters": [
            {"Type": "TERM_MATCH", "Field": "instanceType", "Value": P4D},
            {"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION},
            {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
            {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
            {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
            {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
        ],
        "MaxResults": PRICING_PAGE_SIZE,
        **extra,
    }


def test_the_on_demand_price_is_the_hourly_usd_of_the_on_demand_terms() -> None:
    pricing = _client("pricing", "us-east-1")
    with Stubber(pricing) as stub:
        stub.add_response(
            "get_products", {"FormatVersion": "aws_v1", "PriceList": [_product("32.7726000000")]}, _pricing_request()
        )
        assert _book(pricing=pricing).on_demand_price(region=REGION, instance_type=P4D) == pytest.approx(32.7726)


def test_no_product_listed_is_none_and_several_give_the_highest() -> None:
    pricing = _client("pricing", "us-east-1")
    with Stubber(pricing) as stub:
        stub.add_response("get_products", {"PriceList": []}, _pricing_request())
        stub.add_response("get_products", {"PriceList": [_product("30.0"), _product("32.5")]}, _pricing_request())
        book = _book(pricing=pricing)
        assert book.on_demand_price(region=REGION, instance_type=P4D) is None
        assert book.on_demand_price(region=REGION, instance_type=P4D) == pytest.approx(32.5)


def test_the_price_list_is_read_only_so_many_pages() -> None:
    pricing = _client("pricing", "us-east-1")
    with Stubber(pricing) as stub:
        for page in range(MAX_PRICING_PAGES):
            stub.add_response(
                "get_products",
                {"PriceList": [_product(f"{page + 1}.0")], "NextToken": f"t{page}"},
                _pricing_request(**({"NextToken": f"t{page - 1}"} if page else {})),
            )
        price = _book(pricing=pricing).on_demand_price(region=REGION, instance_type=P4D)
        stub.assert_no_pending_responses()
    assert price == pytest.approx(float(MAX_PRICING_PAGES))


@pytest.mark.parametrize(
    ("item", "prices"),
    [
        (_product("3.06"), [3.06]),
        (json.loads(_product("3.06")), [3.06]),  # already decoded
        (_product("0.0000000000"), []),  # a zero price is no price
        (_product("3.06", unit="Quantity"), []),  # not hourly
        (_product("NaN"), []),
        ("{not json", []),
        ("x" * 300_000, []),  # too large to be one product
        (json.dumps({"terms": {"OnDemand": ["not", "an", "object"]}}), []),
        (json.dumps([1, 2]), []),
        (None, []),
    ],
)
def test_a_price_list_item_gives_its_prices_or_none_whatever_it_holds(item: object, prices: list[float]) -> None:
    assert on_demand_prices(item) == pytest.approx(prices)


def test_a_book_of_a_session_makes_its_own_clients_on_the_first_price_asked() -> None:
    made: list[tuple[str, str, Any]] = []
    ec2, pricing = _client("ec2"), _client("pricing", "us-east-1")

    class Session:
        def client(self, service: str, *, region_name: str, config: Any) -> Any:
            made.append((service, region_name, config))
            return ec2 if service == "ec2" else pricing

    book = Ec2PriceBook.in_session(Session())
    assert made == []
    with Stubber(ec2) as ec2_stub, Stubber(pricing) as pricing_stub:
        for _ in range(2):
            ec2_stub.add_response("describe_spot_price_history", {"SpotPriceHistory": []}, ANY_PARAMS)
            pricing_stub.add_response("get_products", {"PriceList": []}, ANY_PARAMS)
            book.spot_price(region=REGION, instance_type=P4D)
            book.on_demand_price(region=REGION, instance_type=P4D)
    # one client each, the Price List API's in us-east-1, with short timeouts and one retry
    assert [(service, region) for service, region, _ in made] == [("ec2", REGION), ("pricing", "us-east-1")]
    assert all(config is PRICE_CALLS for _, _, config in made)
    assert (PRICE_CALLS.connect_timeout, PRICE_CALLS.read_timeout) == (3, 10)
    assert PRICE_CALLS.retries == {"max_attempts": 2, "mode": "standard"}


# ---- errors: Squall's only ---------------------------------------------------------------------

METHODS: dict[str, tuple[str, str, Callable[[Any], object]]] = {
    "spot_price": ("ec2", "describe_spot_price_history", lambda c: _book(c).spot_price(region=REGION, instance_type=P4D)),
    "on_demand_price": (
        "pricing",
        "get_products",
        lambda c: _book(pricing=c).on_demand_price(region=REGION, instance_type=P4D),
    ),
    "records.load": ("dynamodb", "get_item", lambda c: DynamoPriceRecords(c, "jobs").load()),
    "records.save": ("dynamodb", "put_item", lambda c: DynamoPriceRecords(c, "jobs").save(PriceSnapshot(at=NOW))),
}


def _assert_squall(raised: BaseException, expected: type[SquallError]) -> None:
    assert isinstance(raised, expected), f"{type(raised).__module__}.{type(raised).__name__} leaked out"
    if expected is PermanentError:
        assert not isinstance(raised, RetryableError)
    assert raised.__cause__ is not None


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_aws_answers_leave_every_price_method_as_squall_errors(method: str, answer: str) -> None:
    service, operation, call = METHODS[method]
    code, status, message, expected = ANSWERS[answer]
    client = _client(service, "us-east-1" if service == "pricing" else REGION)
    stub = Stubber(client)
    stub.add_client_error(operation, code, message, http_status_code=status, expected_params=None)
    with stub, pytest.raises(Exception) as raised:
        call(client)
    _assert_squall(raised.value, expected)
    assert isinstance(raised.value.__cause__, ClientError)
    assert code in str(raised.value)


@pytest.mark.parametrize("failure", sorted(BOTOCORE))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_botocore_failures_leave_every_price_method_as_squall_errors(method: str, failure: str) -> None:
    service, _, call = METHODS[method]
    make, expected = BOTOCORE[failure]
    client = _client(service, "us-east-1" if service == "pricing" else REGION)

    def fail(**_: Any) -> None:
        raise make()

    client.meta.events.register("before-call", fail)
    with pytest.raises(Exception) as raised:
        call(client)
    _assert_squall(raised.value, expected)


# ---- the stored snapshot ------------------------------------------------------------------------


def test_the_snapshot_is_kept_in_the_job_table(jobs_table: Any) -> None:
    records = DynamoPriceRecords(jobs_table, "jobs")
    assert records.load() is None
    snapshot = PriceSnapshot(
        at=NOW, on_demand={(REGION, P4D): 32.77, (REGION, "g5.12xlarge"): None}, spot={(REGION, P4D): 9.8}
    )
    records.save(snapshot)
    assert DynamoPriceRecords(jobs_table, "jobs").load() == snapshot  # a cold function reads it back
    later = PriceSnapshot(at=NOW + timedelta(hours=1), on_demand={(REGION, P4D): 33.0}, failed=True)
    records.save(later)
    assert records.load() == later


@pytest.mark.parametrize(
    "stored",
    [
        {"snapshot": {"S": "{not json"}},
        {"snapshot": {"S": json.dumps({"at": "2026-03-01T12:00:00"})}},  # naive time
        {"snapshot": {"N": "1"}},
        {},
    ],
)
def test_a_stored_snapshot_squall_did_not_write_is_a_permanent_error(jobs_table: Any, stored: dict[str, Any]) -> None:
    jobs_table.put_item(TableName="jobs", Item={"pk": {"S": "PRICES"}, "sk": {"S": "LATEST"}, **stored})
    with pytest.raises(PermanentError, match="stored prices"):
        DynamoPriceRecords(jobs_table, "jobs").load()

