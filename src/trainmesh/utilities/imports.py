"""Lightning's ``utilities.imports``: the flags programs import to ask what is installed.

Published Lightning programs write ``from lightning.pytorch.utilities.imports import
_TORCHVISION_AVAILABLE`` and import torchvision only when it is true; the port imports the same
names from here. Each requirement flag is true exactly when Lightning 2.6's is (the installed
distribution's version read from its metadata, as Lightning's ``RequirementCache`` reads it), and
prints Lightning's sentence.

>>> bool(_TORCH_GREATER_EQUAL_2_6)
True
>>> str(_Requirement("no-such-package-here"))
"Requirement 'no-such-package-here' not met. HINT: Try running `pip install -U 'no-such-package-here'`"
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
import sys

__all__: list[str] = []  # every name here is private, as in Lightning's module

_SPECIFIER = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9A-Za-z.+-]*)\s*")


def _release(version: str) -> tuple[int, ...]:
    """The release numbers of a version (``2.13.0+cpu`` -> ``(2, 13, 0)``), padded when compared."""
    numbers = re.match(r"[0-9]+(\.[0-9]+)*", version)
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


def _satisfies(version: str, specifiers: str) -> bool:
    have = _release(version)
    for spec in filter(None, specifiers.split(",")):
        match = _SPECIFIER.fullmatch(spec)
        if match is None:
            raise ValueError(f"cannot read the version specifier {spec!r}")
        op, wanted = match.group(1), _release(match.group(2))
        width = max(len(have), len(wanted))
        a, b = have + (0,) * (width - len(have)), wanted + (0,) * (width - len(wanted))
        if not {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]:
            return False
    return True


class _Requirement:
    """Lightning's ``RequirementCache(requirement)``: true when the distribution is installed at a
    version the specifiers allow, or, for a bare name whose distribution is not found, when a
    module of that name imports (as Lightning's falls back); ``str`` says whether the distribution
    was found, with Lightning's install hint."""

    def __init__(self, requirement: str) -> None:
        self.requirement = requirement
        self.name = re.split(r"[<>=!]", requirement, maxsplit=1)[0].strip()

    @functools.cached_property
    def _met(self) -> bool:
        try:
            version = importlib.metadata.version(self.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        return _satisfies(version, self.requirement[len(self.name) :])

    @functools.cached_property
    def _available(self) -> bool:
        if self._met:
            return True
        if any(c in self.requirement for c in "=<>"):
            return False
        return _module_available(self.name)  # "sometimes the metadata fails but the module imports"

    def __bool__(self) -> bool:
        return self._available

    def __str__(self) -> str:
        if self._met:
            return f"Requirement {self.requirement!r} met"
        return f"Requirement {self.requirement!r} not met. HINT: Try running `pip install -U {self.requirement!r}`"

    __repr__ = __str__


def _package_available(name: str) -> bool:
    """Lightning's ``package_available``: the package can be found (it is not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _module_available(module_path: str) -> bool:
    """Lightning's ``module_available``: its package is found and the module imports."""
    if not _package_available(module_path.split(".")[0]):
        return False
    try:
        importlib.import_module(module_path)
    except ImportError:
        return False
    return True


_PYTHON_GREATER_EQUAL_3_11_0 = sys.version_info[:2] >= (3, 11)
_TORCH_GREATER_EQUAL_2_6 = _Requirement("torch>=2.6.0")
_TORCHMETRICS_GREATER_EQUAL_0_8_0 = _Requirement("torchmetrics>=0.8.0")
_TORCHMETRICS_GREATER_EQUAL_0_9_1 = _Requirement("torchmetrics>=0.9.1")
_TORCHMETRICS_GREATER_EQUAL_0_11 = _Requirement("torchmetrics>=0.11.0")
_TORCHMETRICS_GREATER_EQUAL_1_0_0 = _Requirement("torchmetrics>=1.0.0")
_TORCH_EQUAL_2_8 = _Requirement("torch>=2.8.0,<2.9.0")
_TORCH_EQUAL_2_9 = _Requirement("torch>=2.9.0,<2.10.0")
_TORCH_GREATER_EQUAL_2_8 = _Requirement("torch>=2.8.0")
_OMEGACONF_AVAILABLE = _package_available("omegaconf")
_TORCHVISION_AVAILABLE = _Requirement("torchvision")
_RICH_AVAILABLE = _Requirement("rich>=10.2.2")


@functools.lru_cache(maxsize=128)
def _try_import_module(module_name: str) -> bool:
    """Whether ``module_name`` imports (Lightning's: a failed import warns and answers False)."""
    import warnings

    try:
        __import__(module_name)
        return True
    except (ImportError, AttributeError) as err:
        warnings.warn(f"Import of {module_name} package failed for some compatibility issues:\n{err}", stacklevel=2)
        return False
