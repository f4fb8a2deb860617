"""Kubernetes resource quantities (``resource.Quantity``) as exact decimals.

The scheduler adds and compares quotas ("36Gi" of memory, "500m" of CPU), so
quantities must be exact: they are parsed into :class:`decimal.Decimal`, never
floats. A parsed value also remembers how it was written, so that an object
read from the API server is written back exactly as it came (``9`` stays the
integer ``9``, ``"36Gi"`` stays ``"36Gi"``); values computed by arithmetic are
plain ``Decimal`` and are written in Kubernetes' canonical form.
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_UP, Context, Decimal, localcontext
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator

from multikueue.api.schema import Schema

__all__ = [
    "QUANTITY_PATTERN",
    "Quantity",
    "QuantityValue",
    "format_quantity",
    "milli_value",
    "parse_quantity",
    "quantity_json",
    "value_ceil",
]

#: Decimal suffixes and their powers of ten.
DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}

#: Binary suffixes and their powers of two.
BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}

#: What the API server accepts for a quantity string (the CRD ``pattern``):
#: a signed decimal number followed by a binary suffix, a decimal suffix, or
#: an exponent.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_NUMBER = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")

# Quotas of exabytes expressed in nano units need ~30 significant digits; the
# default context (28 digits) could round them, so parse with more headroom.
_CONTEXT = Context(prec=80)


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """Parse a Kubernetes quantity (``"1.5Gi"``, ``"500m"``, ``"1e3"``, ``4``) exactly.

    Raises ``ValueError`` for anything the API server would not accept as a
    quantity, with the offending text in the message.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}: a boolean is not a quantity")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"invalid quantity {value!r}: not a finite number")
        return Decimal(value)
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"invalid quantity {value!r}: not a finite number")
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}: expected a string or a number")
    match = _NUMBER.match(value)
    if match is None:
        raise ValueError(f"invalid quantity {value!r}: expected a number with an optional suffix")
    sign, digits, suffix = match.groups()
    if suffix in DECIMAL_SUFFIXES:
        scale, power_of_two = DECIMAL_SUFFIXES[suffix], 0
    elif suffix in BINARY_SUFFIXES:
        scale, power_of_two = 0, BINARY_SUFFIXES[suffix]
    else:
        exponent = _EXPONENT.match(suffix)
        if exponent is None:
            raise ValueError(
                f"invalid quantity {value!r}: unknown suffix {suffix!r} "
                "(use n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)"
            )
        scale, power_of_two = int(exponent.group(1)), 0
    try:
        with localcontext(_CONTEXT):
            result = Decimal(digits).scaleb(scale) * (1 << power_of_two)
            result = -result if sign == "-" else +result
            # Whole numbers come back without exponent or trailing zeros (1E+3 -> 1000).
            if result == result.to_integral_value():
                return result.quantize(Decimal(1))
            return result.normalize()
    except ArithmeticError as err:  # more digits or a larger exponent than any real quantity has
        raise ValueError(f"invalid quantity {value!r}: out of range") from err


@functools.lru_cache(maxsize=4096)
def format_quantity(value: Decimal | int | str, *, binary: bool | None = None) -> str:
    """Write a quantity the way Kubernetes canonicalizes it.

    Memoised: a scheduling cycle writes the same few amounts into every
    "why it waits" message and admission (equal values have one canonical
    form, so ``Decimal("1E+3")`` and ``1000`` share an entry).

    Fractions below one nano unit are rounded up (away from zero), as the API
    server does. ``binary=True`` uses binary suffixes (``Ki`` ... ``Ei``) for
    whole numbers, ``binary=False`` decimal ones (``k`` ... ``E``, ``m`` ...
    ``n``); ``None`` picks the shorter of the two, decimal on a tie, so memory
    reads ``36Gi`` and CPU reads ``1500m``.
    """
    number = parse_quantity(value) if not isinstance(value, Decimal) else value
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    with localcontext(_CONTEXT):
        nanos = int((abs(number) * 10**9).to_integral_value(rounding=ROUND_UP))
    decimal = sign + _decimal_si(nanos)
    if binary is False or nanos % 10**9 != 0:
        return decimal  # fractions have no binary form
    binary_form = sign + _binary_si(nanos // 10**9)
    if binary is True or len(binary_form) < len(decimal):
        return binary_form
    return decimal


def _decimal_si(nanos: int) -> str:
    """A positive amount of nano units with the largest decimal suffix that keeps it whole."""
    for suffix, power in sorted(DECIMAL_SUFFIXES.items(), key=lambda item: -item[1]):
        scale = 10 ** (power + 9)
        if nanos % scale == 0:
            return f"{nanos // scale}{suffix}"
    raise AssertionError("unreachable: the nano suffix always divides")  # pragma: no cover


def _binary_si(units: int) -> str:
    """A positive whole number with the largest binary suffix that keeps it whole."""
    for suffix, power in reversed(BINARY_SUFFIXES.items()):
        if units % (2**power) == 0:
            return f"{units // 2**power}{suffix}"
    return str(units)


def value_ceil(value: Decimal | int | str) -> int:
    """The quantity as a whole number, rounded away from zero (Kubernetes' ``Value()``)."""
    number = parse_quantity(value) if not isinstance(value, Decimal) else value
    return int(number.to_integral_value(rounding=ROUND_UP))


def milli_value(value: Decimal | int | str) -> int:
    """The quantity in thousandths, rounded away from zero (Kubernetes' ``MilliValue()``), e.g. CPU millicores."""
    number = parse_quantity(value) if not isinstance(value, Decimal) else value
    with localcontext(_CONTEXT):
        return int((number * 1000).to_integral_value(rounding=ROUND_UP))


class QuantityValue(Decimal):
    """A quantity's exact value that also remembers how it was written.

    It is a ``Decimal``: compare it, add it, sum it. Arithmetic results are
    plain ``Decimal`` (they have no spelling of their own). ``text`` gives the
    original spelling when there is one, else the canonical form.
    """

    __slots__ = ("_original",)
    _original: str | int | None

    def __new__(cls, value: str | int | float | Decimal) -> QuantityValue:
        instance = super().__new__(cls, parse_quantity(value))
        if isinstance(value, QuantityValue):
            instance._original = value._original
        elif isinstance(value, (str, int)) and not isinstance(value, bool):
            instance._original = value
        else:
            instance._original = None
        return instance

    @property
    def original(self) -> str | int | None:
        """The exact text or integer this value was parsed from, if any."""
        return self._original

    @property
    def text(self) -> str:
        """A human-readable form: the original spelling, else the canonical one."""
        if self._original is not None:
            return str(self._original)
        return format_quantity(Decimal(self))

    def __repr__(self) -> str:
        return f"QuantityValue({self.text!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (QuantityValue, (self._original if self._original is not None else str(Decimal(self)),))

    def __copy__(self) -> QuantityValue:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> QuantityValue:
        return self


def _validate_quantity(value: Any) -> QuantityValue:
    if isinstance(value, QuantityValue):
        return value
    return QuantityValue(value)


def quantity_json(value: Decimal | int | str) -> int | str:
    """How a quantity is written in JSON: its original spelling, else the canonical string."""
    if isinstance(value, QuantityValue) and value.original is not None:
        return value.original
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return value
    return format_quantity(Decimal(value))


#: A pydantic field type for quantities: accepts ints, strings (and floats or
#: Decimals from Python code), holds a :class:`QuantityValue`, and writes the
#: original spelling back. In the CRD it is an int-or-string with the
#: quantity pattern, like every ``resource.Quantity``.
Quantity = Annotated[
    QuantityValue,
    PlainValidator(_validate_quantity, json_schema_input_type=int | str),
    PlainSerializer(quantity_json, return_type=int | str, when_used="json"),
    Schema(int_or_string=True, pattern=QUANTITY_PATTERN),
]
