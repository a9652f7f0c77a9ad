from decimal import Decimal

import pytest

from squall.planner.quantity import (
    format_cpu,
    format_memory,
    parse_cpu_millicores,
    parse_memory_bytes,
    parse_quantity,
    parse_whole_count,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("8", Decimal(8)),
        ("1.5", Decimal("1.5")),
        ("60Gi", Decimal(60 * 2**30)),
        ("128974848", Decimal(128974848)),
        ("129e6", Decimal(129_000_000)),
        ("123Mi", Decimal(123 * 2**20)),
        ("1k", Decimal(1000)),
        ("1E", Decimal(10**18)),
        ("1E3", Decimal(1000)),
        ("2Ki", Decimal(2048)),
        ("100n", Decimal("1e-7")),
        (".5", Decimal("0.5")),
        ("+3", Decimal(3)),
        (" 4 ", Decimal(4)),
        (7, Decimal(7)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parses_kubernetes_quantities(text: str | int | float, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("500m", 500), ("8", 8000), ("1.5", 1500), (2, 2000), ("0.1m", 1), ("250u", 1)],
)
def test_cpu_is_millicores_rounded_up(value: str | int, expected: int) -> None:
    assert parse_cpu_millicores(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("60Gi", 60 * 2**30), ("129e6", 129_000_000), ("123Mi", 123 * 2**20), ("1k", 1000), ("100m", 1)],
)
def test_memory_is_bytes_rounded_up(value: str, expected: int) -> None:
    assert parse_memory_bytes(value) == expected


MALFORMED = ["", "abc", "1.2.3", "5 Gi", "1e", "Gi", "--1", "1Zi", "0x10", "1e9999"]
# Other scripts' digits: Kubernetes reads ASCII ones only.
MALFORMED += ["\u0663", "\uff12Gi", "1e\u0663"]


@pytest.mark.parametrize("value", MALFORMED)
def test_rejects_malformed_text_naming_it(value: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(value)


@pytest.mark.parametrize("value", [True, None, [1], float("nan"), float("inf")])
def test_rejects_values_that_are_not_quantities(value: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


def test_rejects_text_longer_than_any_quantity() -> None:
    with pytest.raises(ValueError, match="longer than"):
        parse_quantity("1" * 100)


def test_rejects_negative_requests() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        parse_cpu_millicores("-1")


def test_counts_must_be_whole() -> None:
    assert parse_whole_count("8") == 8
    assert parse_whole_count("1k") == 1000
    with pytest.raises(ValueError, match="whole number"):
        parse_whole_count("1.5")


def test_formats_round_trip_for_reasons() -> None:
    assert format_cpu(4000) == "4"
    assert format_cpu(500) == "500m"
    assert format_memory(16 * 2**30) == "16Gi"
    assert format_memory(3 * 2**20) == "3Mi"
    assert format_memory(1000) == "1000"
    assert parse_memory_bytes(format_memory(55 * 2**30)) == 55 * 2**30
