"""The model services list's paging and the predict form's reading: pure, over a fake store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from squall.cli.errors import CommandError
from squall.console.pages.services import (
    MAX_OFFSET,
    STATES,
    answer_text,
    decode_cursor,
    encode_cursor,
    predict_body,
    services_page,
    state_argument,
)
from squall.core.serving import ModelService, ServiceStatus
from tests.serving_records import first_record

AT = datetime(2026, 1, 5, tzinfo=UTC)


class Services:
    """list_by_status over named services per state, oldest first; records each read's limit."""

    def __init__(self, **by_state: int) -> None:
        self.by_state = {
            ServiceStatus(state): [first_record(f"{state.lower()}-{i}", at=AT)[0] for i in range(count)]
            for state, count in by_state.items()
        }
        self.reads: list[tuple[str, int]] = []

    def list_by_status(self, status: ServiceStatus, *, limit: int = 1000) -> list[ModelService]:
        self.reads.append((status.value, limit))
        return self.by_state.get(status, [])[:limit]


def names(services: list[ModelService]) -> list[str]:
    return [s.name for s in services]


def test_a_page_fills_from_the_states_in_order_and_reads_one_more_than_it_shows() -> None:
    store = Services(SERVING=3, DEPLOYING=2)
    first = services_page(store, states=STATES, after=None, size=2)
    assert names(first.services) == ["serving-0", "serving-1"] and first.cursor == "SERVING:2"
    assert store.reads == [("SERVING", 3)]
    store.reads.clear()
    second = services_page(store, states=STATES, after=decode_cursor(first.cursor, states=STATES), size=2)
    assert names(second.services) == ["serving-2", "deploying-0"] and second.cursor == "DEPLOYING:1"
    assert store.reads == [("SERVING", 5), ("DEPLOYING", 2)]
    third = services_page(store, states=STATES, after=decode_cursor(second.cursor, states=STATES), size=2)
    assert names(third.services) == ["deploying-1"] and third.cursor is None


def test_a_page_that_ends_with_a_state_points_at_the_next_state_with_services_only() -> None:
    store = Services(SERVING=2, STOPPED=1)
    page = services_page(store, states=STATES, after=None, size=2)
    assert page.cursor == "STOPPED:0"
    assert store.reads == [("SERVING", 3), ("DEPLOYING", 1), ("FAILED", 1), ("STOPPED", 1)]
    assert services_page(Services(SERVING=2), states=STATES, after=None, size=2).cursor is None


def test_no_page_reads_past_the_deepest_offset() -> None:
    store = Services(SERVING=MAX_OFFSET + 10)
    page = services_page(store, states=STATES, after=(ServiceStatus.SERVING, MAX_OFFSET - 1), size=5)
    assert len(page.services) == 5 and page.cursor is None
    assert store.reads == [("SERVING", MAX_OFFSET + 5)]


def test_cursors_read_back_strictly() -> None:
    assert decode_cursor(encode_cursor(ServiceStatus.FAILED, 50), states=STATES) == (ServiceStatus.FAILED, 50)
    for bad in (
        "SERVING",
        "SERVING:",
        "SERVING:-1",
        "SERVING:x",
        "RUNNING:2",
        f"SERVING:{MAX_OFFSET + 1}",
        "SERVING:0000001",
    ):
        with pytest.raises(CommandError, match=r"^after: expected a cursor"):
            decode_cursor(bad, states=STATES)
    with pytest.raises(CommandError, match=r"^after:"):
        decode_cursor("SERVING:2", states=(ServiceStatus.FAILED,))


def test_state_argument() -> None:
    assert state_argument(None) is None and state_argument("") is None
    assert state_argument("STOPPED") is ServiceStatus.STOPPED
    with pytest.raises(
        CommandError, match=r"^state: expected one of SERVING, DEPLOYING, FAILED, STOPPED, got 'serving'"
    ):
        state_argument("serving")


@pytest.mark.parametrize(
    ("text", "body"),
    [
        ("[[1.0, 2.0]]", {"instances": [[1.0, 2.0]]}),
        ('{"instances": [1]}', {"instances": [1]}),
        ('{"inputs": {"x": [1]}, "signature_name": "s"}', {"inputs": {"x": [1]}, "signature_name": "s"}),
    ],
)
def test_predict_body_takes_rows_or_a_whole_request(text: str, body: dict[str, Any]) -> None:
    assert predict_body(text) == body


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("  ", "instances: empty"),
        ("{", "instances: not JSON"),
        ("3", "instances: expected a JSON object with 'instances' or 'inputs', got a number"),
        ('{"instances": [1], "inputs": [1]}', "instances: has both of 'instances'"),
        ("[1]" + " " * 256_000, "instances: 256003 characters"),
    ],
)
def test_predict_body_refusals_name_the_field(text: str, said: str) -> None:
    with pytest.raises(CommandError, match=f"^{said}"):
        predict_body(text)


def test_a_long_answer_is_cut() -> None:
    text, cut = answer_text({"predictions": list(range(100_000))})
    assert cut and len(text) == 200_000
    assert answer_text({"predictions": [1]}) == ('{\n  "predictions": [\n    1\n  ]\n}', False)
