"""Lightning's string enums: members that compare equal to their value, whatever its case.

>>> GradClipAlgorithmType.NORM == "NORM"
True
>>> GradClipAlgorithmType.from_str("value")
<GradClipAlgorithmType.VALUE: 'value'>
"""

from __future__ import annotations

from enum import Enum
from typing import Literal, TypeVar

_E = TypeVar("_E", bound="LightningEnum")


class LightningEnum(str, Enum):
    """A ``str`` enum: ``from_str`` by name or value, equality with plain strings ignoring case."""

    @classmethod
    def from_str(cls: type[_E], value: str, source: Literal["key", "value", "any"] = "key") -> _E:
        for member in cls:
            by_key = source in ("key", "any") and member.name.lower() == value.lower()
            by_value = source in ("value", "any") and str(member.value).lower() == value.lower()
            if by_key or by_value:
                return member
        raise ValueError(f"{value!r} is not a {cls.__name__}; choose from {[m.value for m in cls]}")

    @classmethod
    def try_from_str(cls: type[_E], value: str, source: Literal["key", "value", "any"] = "key") -> _E | None:
        try:
            return cls.from_str(value, source)
        except ValueError:
            return None

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return str(self.value).lower() == str(other).lower()

    def __hash__(self) -> int:
        # Equal to its lower-cased value, so it must hash as that value does.
        return hash(str(self.value).lower())


class GradClipAlgorithmType(LightningEnum):
    """``gradient_clip_algorithm``: ``"norm"`` clips the norm of all gradients together,
    ``"value"`` each gradient element."""

    VALUE = "value"
    NORM = "norm"

    @staticmethod
    def supported_type(val: str) -> bool:
        return any(member.value == val for member in GradClipAlgorithmType)

    @staticmethod
    def supported_types() -> list[str]:
        return [member.value for member in GradClipAlgorithmType]
