"""Kubernetes quantities: parsing, canonical formatting, arithmetic, and the pydantic type."""

from __future__ import annotations

import copy
import pickle
from decimal import Decimal

import pytest
from pydantic import BaseModel, ValidationError

from multikueue.api.quantity import (
    QUANTITY_PATTERN,
    Quantity,
    QuantityValue,
    format_quantity,
    milli_value,
    parse_quantity,
    quantity_json,
    value_ceil,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", "0"),
        ("1", "1"),
        ("9", "9"),
        ("1.5", "1.5"),
        (".5", "0.5"),
        ("1.", "1"),
        ("+3", "3"),
        ("-2", "-2"),
        ("500m", "0.5"),
        ("100u", "0.0001"),
        ("5n", "0.000000005"),
        ("1k", "1000"),
        ("2M", "2000000"),
        ("3G", "3000000000"),
        ("1T", "1000000000000"),
        ("1P", "1000000000000000"),
        ("1E", "1000000000000000000"),
        ("1Ki", "1024"),
        ("1Mi", "1048576"),
        ("36Gi", "38654705664"),
        ("1Ti", "1099511627776"),
        ("1Pi", "1125899906842624"),
        ("1Ei", "1152921504606846976"),
        ("1.5Gi", "1610612736"),
        ("0.5Ki", "512"),
        ("1e3", "1000"),
        ("1E3", "1000"),
        ("1e+3", "1000"),
        ("25e-2", "0.25"),
        ("-1.5Ki", "-1536"),
        ("12.5m", "0.0125"),
    ],
)
def test_parse_quantity_strings(text: str, expected: str) -> None:
    assert parse_quantity(text) == Decimal(expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, "0"), (7, "7"), (-3, "-3"), (0.25, "0.25"), (1.5, "1.5"), (Decimal("2.5"), "2.5")],
)
def test_parse_quantity_numbers(value: int | float | Decimal, expected: str) -> None:
    assert parse_quantity(value) == Decimal(expected)


def test_parse_normalizes_whole_numbers() -> None:
    assert str(parse_quantity("1e3")) == "1000"
    assert str(parse_quantity("2k")) == "2000"
    assert str(parse_quantity("500m")) == "0.5"


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "abc",
        "Gi",
        "1Kb",
        "1kk",
        "1.2.3",
        "1e",
        "1ee3",
        "--1",
        "+-1",
        "1i",
        "1KI",
        "0x10",
        "1e1.5",
        "1,5",
    ],
)
def test_parse_quantity_rejects_invalid_strings(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [], float("nan"), float("inf"), Decimal("NaN"), "1e100", "1e9999999"])
def test_parse_quantity_rejects_other_values(value: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "0"),
        ("1", "1"),
        ("1500", "1500"),
        ("1000", "1k"),
        ("1.5", "1500m"),
        ("0.1", "100m"),
        ("100u", "100u"),
        ("1e3", "1k"),
        ("129e6", "129M"),
        ("1E", "1E"),
        ("1G", "1G"),
        ("-2k", "-2k"),
        ("36Gi", "36Gi"),
        ("1.5Gi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1024", "1Ki"),
        ("1536", "1536"),
        ("1000Mi", "1000Mi"),
        ("1024000", "1024k"),
        ("-1Gi", "-1Gi"),
        ("1e-9", "1n"),
        # Below nano precision Kubernetes rounds up, away from zero.
        ("1e-10", "1n"),
        ("1.0000000001", "1000000001n"),
        ("-1e-10", "-1n"),
    ],
)
def test_format_quantity_is_canonical(value: str, expected: str) -> None:
    assert format_quantity(parse_quantity(value)) == expected
    assert format_quantity(value) == expected


def test_format_quantity_forced_styles() -> None:
    assert format_quantity(Decimal(38654705664), binary=False) == "38654705664"
    assert format_quantity(Decimal(1000), binary=True) == "1000"
    assert format_quantity(Decimal(2048), binary=True) == "2Ki"
    assert format_quantity(Decimal("1.5"), binary=True) == "1500m"  # fractions have no binary form


@pytest.mark.parametrize(
    "text", ["1", "1500m", "36Gi", "1536Mi", "100u", "7n", "1E", "129M", "-5k", "4Ki", "999999999999"]
)
def test_format_then_parse_round_trips(text: str) -> None:
    value = parse_quantity(text)
    assert parse_quantity(format_quantity(value)) == value


def test_arithmetic_is_exact() -> None:
    cpus = [parse_quantity(v) for v in ("100m", "200m", "0.7")]
    assert sum(cpus) == 1
    assert format_quantity(sum(cpus)) == "1"
    memory = parse_quantity("36Gi") - parse_quantity("512Mi") * 3
    assert format_quantity(memory) == "35328Mi"
    # Binary floats would make this 0.30000000000000004.
    assert parse_quantity("0.1") + parse_quantity("0.2") == parse_quantity("300m")
    # count x per-pod request, as quota usage is computed.
    assert format_quantity(parse_quantity("250m") * 6) == "1500m"
    assert parse_quantity("9") >= parse_quantity("8500m")
    assert parse_quantity("1Gi") > parse_quantity("1G")


def test_milli_and_whole_values_round_away_from_zero() -> None:
    assert milli_value("1.5") == 1500
    assert milli_value("250m") == 250
    assert milli_value("100u") == 1
    assert milli_value("1Ki") == 1024000
    assert value_ceil("1.2") == 2
    assert value_ceil("2") == 2
    assert value_ceil("-1.2") == -2
    assert value_ceil("1500m") == 2


def test_quantity_value_keeps_its_spelling() -> None:
    memory = QuantityValue("36Gi")
    assert memory == 38654705664
    assert memory.original == "36Gi"
    assert memory.text == "36Gi"
    assert repr(memory) == "QuantityValue('36Gi')"
    assert QuantityValue(9).original == 9
    computed = QuantityValue(Decimal("1.5"))
    assert computed.original is None
    assert computed.text == "1500m"
    assert QuantityValue(memory).original == "36Gi"
    assert isinstance(memory + 1, Decimal)
    assert hash(QuantityValue("1k")) == hash(Decimal(1000))
    assert QuantityValue("1k") == QuantityValue("1000")


def test_quantity_value_survives_copy_and_pickle() -> None:
    memory = QuantityValue("36Gi")
    assert copy.deepcopy(memory).original == "36Gi"
    assert copy.copy(memory).original == "36Gi"
    restored = pickle.loads(pickle.dumps(memory))
    assert restored == memory
    assert restored.original == "36Gi"


def test_quantity_json() -> None:
    assert quantity_json(QuantityValue("36Gi")) == "36Gi"
    assert quantity_json(QuantityValue(9)) == 9
    assert quantity_json(Decimal("1.5")) == "1500m"
    assert quantity_json(Decimal(1024) * 4) == "4Ki"
    assert quantity_json(3) == 3


class _Holder(BaseModel):
    value: Quantity
    limit: Quantity | None = None


def test_pydantic_type_accepts_ints_and_strings_and_writes_them_back() -> None:
    holder = _Holder.model_validate({"value": 9, "limit": "36Gi"})
    assert isinstance(holder.value, QuantityValue)
    assert holder.value == 9
    assert holder.limit == 36 * 2**30
    assert holder.model_dump(mode="json") == {"value": 9, "limit": "36Gi"}
    # Python-mode dumps keep the values for arithmetic.
    assert isinstance(holder.model_dump()["limit"], QuantityValue)


def test_pydantic_type_writes_computed_values_canonically() -> None:
    holder = _Holder(value=Decimal("0.25") * 2)
    assert holder.model_dump(mode="json", exclude_none=True) == {"value": "500m"}


def test_pydantic_type_rejects_bad_quantities_with_the_text() -> None:
    with pytest.raises(ValidationError, match="1Kb"):
        _Holder.model_validate({"value": "1Kb"})


def test_crd_pattern_agrees_with_the_parser() -> None:
    import re

    pattern = re.compile(QUANTITY_PATTERN)
    for good in ["1", "1.5", ".5", "1.", "+1", "-1", "500m", "36Gi", "1e3", "1E3", "1E", "1e-3", "5n"]:
        assert pattern.match(good), good
        parse_quantity(good)
    for bad in ["", "abc", "1Kb", "1 ", "Gi", "1e", "--1", "1i"]:
        assert not pattern.match(bad), bad
        with pytest.raises(ValueError):
            parse_quantity(bad)
