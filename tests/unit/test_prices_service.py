"""services/prices.py GroupPrices: refreshed at most every hour, kept where a cold function finds
them, the configured or last known prices when EC2 or the store cannot answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from squall.core.errors import PermanentError, RetryableError
from squall.core.prices import REFRESH_INTERVAL, RETRY_INTERVAL, PriceSnapshot
from squall.local.clock import VirtualClock
from squall.local.prices import InMemoryPriceRecords, LocalPriceBook
from squall.planner import NodeGroup
from squall.planner.inputs import read_node_groups
from squall.services.prices import READ_INTERVAL, REFRESH_BUDGET, GroupPrices
from tests.groups import gpu_group

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P3 = ("us-west-2", "p3.2xlarge")
G5 = ("us-west-2", "g5.12xlarge")


def _groups(price_from: str = "ec2") -> list[NodeGroup]:
    return read_node_groups(
        [
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
        ]
    )[0]


def _book() -> LocalPriceBook:
    return LocalPriceBook(on_demand={P3: 3.5, G5: 6.0}, spot={G5: 1.7})


def _prices(
    book: LocalPriceBook | None, records: InMemoryPriceRecords | None = None, clock: VirtualClock | None = None
) -> tuple[GroupPrices, InMemoryPriceRecords, VirtualClock]:
    records = records if records is not None else InMemoryPriceRecords()
    clock = clock if clock is not None else VirtualClock(START)
    return GroupPrices(records=records, clock=clock, book=book), records, clock


def _rates(groups: list[NodeGroup]) -> list[tuple[float | None, float | None]]:
    return [(g.price_per_hour, g.on_demand_price_per_hour) for g in groups]


def test_the_scale_check_gets_ec2_prices_and_keeps_them() -> None:
    # given groups that take their prices from EC2
    book = _book()
    service, records, _ = _prices(book)
    # when the scale check asks for them
    priced = service.refreshed(_groups())
    # then the on-demand group is at the on-demand price, the spot group at the spot price
    assert _rates(priced) == [(3.5, None), (1.7, 6.0)]
    assert sorted(book.calls) == [
        ("on-demand", "us-west-2", "g5.12xlarge"),
        ("on-demand", "us-west-2", "p3.2xlarge"),
        ("spot", "us-west-2", "g5.12xlarge"),
    ]
    # and the prices are kept, with when they were asked
    assert records.snapshot == PriceSnapshot(at=START, on_demand={P3: 3.5, G5: 6.0}, spot={G5: 1.7})


def test_prices_are_asked_again_only_an_hour_later() -> None:
    book = _book()
    service, records, clock = _prices(book)
    groups = _groups()
    first = service.refreshed(groups)
    clock.advance(REFRESH_INTERVAL - timedelta(seconds=1))
    book.spot[G5] = 2.4
    # a check within the hour asks nothing and returns the very same groups
    assert service.refreshed(groups) is first
    assert len(book.calls) == 3
    clock.advance(timedelta(seconds=1))
    assert _rates(service.refreshed(groups))[1] == (2.4, 6.0)
    assert len(book.calls) == 6 and records.saves == 2


def test_a_throttled_refresh_keeps_the_last_prices_asks_no_more_and_tries_again_sooner() -> None:
    book = _book()
    service, records, clock = _prices(book)
    groups = _groups()
    service.refreshed(groups)
    # when an hour later EC2 throttles the first call
    clock.advance(REFRESH_INTERVAL)
    book.on_demand[P3] = 9.0
    book.spot[G5] = 2.9
    book.next_error = RetryableError("Throttling: Rate exceeded")
    priced = service.refreshed(groups)
    # then the check goes on at the last prices known, and nothing more is asked now
    assert _rates(priced) == [(3.5, None), (1.7, 6.0)]
    assert len(book.calls) == 4
    assert records.snapshot is not None and records.snapshot.failed
    # and it is asked again five minutes later, not an hour
    clock.advance(RETRY_INTERVAL - timedelta(seconds=1))
    service.refreshed(groups)
    assert len(book.calls) == 4
    clock.advance(timedelta(seconds=1))
    assert _rates(service.refreshed(groups)) == [(9.0, None), (2.9, 6.0)]
    assert records.snapshot is not None and not records.snapshot.failed


def test_a_refresh_stops_asking_when_its_time_is_spent() -> None:
    clock = VirtualClock(START)

    class SlowBook(LocalPriceBook):
        """Each answer takes 15 seconds."""

        def _called(self, kind: str, region: str, instance_type: str) -> None:
            super()._called(kind, region, instance_type)
            clock.advance(timedelta(seconds=15))

    book = SlowBook(on_demand={P3: 3.5, G5: 6.0}, spot={G5: 1.7})
    service, records, _ = _prices(book, clock=clock)
    priced = service.refreshed(_groups())
    # two answers fit in REFRESH_BUDGET (20 s): the third price is left for the retry
    assert timedelta(seconds=20) == REFRESH_BUDGET
    assert len(book.calls) == 2
    assert _rates(priced) == [(3.5, None), (2.0, 6.0)]
    assert records.snapshot is not None and records.snapshot.failed


def test_without_any_answer_the_configured_prices_stand() -> None:
    book = LocalPriceBook()  # EC2 lists nothing
    service, _, _ = _prices(book)
    groups = _groups()
    assert _rates(service.refreshed(groups)) == [(3.06, None), (2.0, 5.672)]
    failing = _book()
    failing.next_error = PermanentError("AccessDenied: not authorized to perform pricing:GetProducts")
    service, records, _ = _prices(failing)
    priced = service.refreshed(groups)
    # the one call that failed (p3's on-demand price) leaves its price as configured
    assert failing.calls[0] == ("on-demand", "us-west-2", "p3.2xlarge")
    assert _rates(priced) == [(3.06, None), (1.7, 6.0)]
    assert records.snapshot is not None and records.snapshot.failed


def test_a_cold_function_resumes_from_the_kept_prices_without_asking_ec2() -> None:
    book = _book()
    warm, records, clock = _prices(book)
    warm.refreshed(_groups())
    # when a new environment starts half an hour later with the same store
    clock.advance(timedelta(minutes=30))
    cold_book = _book()
    cold_book.spot[G5] = 9.9
    cold, _, _ = _prices(cold_book, records, clock)
    # then it prices the groups as the last refresh did, and asks EC2 nothing
    assert _rates(cold.refreshed(_groups())) == [(3.5, None), (1.7, 6.0)]
    assert cold_book.calls == []
    # and an hour after that refresh it asks again
    clock.advance(timedelta(minutes=30))
    assert _rates(cold.refreshed(_groups()))[1] == (9.9, 6.0)


def test_an_environment_holding_old_prices_takes_another_ones_refresh_from_the_store() -> None:
    clock = VirtualClock(START)
    records = InMemoryPriceRecords()
    first_book, second_book = _book(), _book()
    first, _, _ = _prices(first_book, records, clock)
    second, _, _ = _prices(second_book, records, clock)
    first.refreshed(_groups())
    second.refreshed(_groups())  # read what the first one kept
    clock.advance(REFRESH_INTERVAL)
    first.refreshed(_groups())  # the first refreshes on the hour
    calls = len(second_book.calls)
    # the second one's prices are due by its memory, but the store has new ones
    second.refreshed(_groups())
    assert len(second_book.calls) == calls == 0


def test_a_store_that_cannot_be_read_or_written_is_a_warning_not_a_failure() -> None:
    records = InMemoryPriceRecords(unavailable=True)
    book = _book()
    service, _, clock = _prices(book, records)
    assert _rates(service.refreshed(_groups())) == [(3.5, None), (1.7, 6.0)]
    # the prices are held in memory: within the hour nothing is asked again
    clock.advance(timedelta(minutes=10))
    service.refreshed(_groups())
    assert len(book.calls) == 3


def test_groups_without_price_from_ec2_ask_nothing_and_read_nothing() -> None:
    records = InMemoryPriceRecords(unavailable=True)  # any read would warn
    book = _book()
    service, _, _ = _prices(book, records)
    groups = _groups("config")
    assert service.refreshed(groups) == groups
    assert service.known(groups) == groups
    assert book.calls == []


def test_a_reader_takes_the_kept_prices_never_ec2_and_reads_again_after_five_minutes() -> None:
    clock = VirtualClock(START)
    records = InMemoryPriceRecords()
    book = _book()
    scale, _, _ = _prices(book, records, clock)
    reader, _, _ = _prices(None, records, clock)
    groups = _groups()
    # before any refresh, the configured prices; read again at the next call
    assert _rates(reader.known(groups)) == [(3.06, None), (2.0, 5.672)]
    scale.refreshed(groups)
    assert _rates(reader.known(groups)) == [(3.5, None), (1.7, 6.0)]
    # the reader reads a minute before the scale check refreshes on the hour: it sees the new
    # prices five minutes after its read, not before
    clock.advance(REFRESH_INTERVAL - timedelta(minutes=1))
    assert _rates(reader.known(groups)) == [(3.5, None), (1.7, 6.0)]
    clock.advance(timedelta(minutes=1))
    book.spot[G5] = 2.2
    scale.refreshed(groups)
    clock.advance(READ_INTERVAL - timedelta(minutes=1, seconds=1))
    assert _rates(reader.known(groups)) == [(3.5, None), (1.7, 6.0)]
    clock.advance(timedelta(seconds=1))
    assert _rates(reader.known(groups)) == [(3.5, None), (2.2, 6.0)]


def test_a_reader_without_a_book_never_refreshes() -> None:
    service, records, _ = _prices(None)
    assert _rates(service.refreshed(_groups())) == [(3.06, None), (2.0, 5.672)]
    assert records.saves == 0
