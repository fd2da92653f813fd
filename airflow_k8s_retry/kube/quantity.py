"""Resource quantities as Kubernetes writes them (``2Gi``, ``1500M``, ``500m``), parsed by the
``kubernetes`` client's own rules."""

from __future__ import annotations

from decimal import Decimal


def parse_memory(value: object, what: str) -> Decimal:
    """Bytes of a memory quantity (``"2Gi"``, ``"1500M"``, ``2147483648``); a one-line error naming
    ``what`` otherwise."""
    from kubernetes.utils import parse_quantity

    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError):
        fix = "write it as Kubernetes does, e.g. '2Gi'"
        raise ValueError(f"{what}: {value!r} is not a memory quantity; {fix}") from None
