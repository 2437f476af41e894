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
from collections.abc import Callable
from typing import Any

__all__ = ["RequirementCache", "compare_version"]  # the flags are private, as in Lightning's module

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


class RequirementCache:
    """Lightning's ``RequirementCache`` (lightning_utilities'): truthy when ``requirement`` (a
    distribution and version specifiers) is installed, or, for a bare name whose distribution is not
    found (or with ``module`` given), when that module imports; ``str`` says which, with Lightning's
    words. Extras (``pkg[extra]``) are not checked. Read once, on first use.

    Args:
        requirement: e.g. ``"torchvision>=0.15"`` (default ``None``).
        module: a module to import instead of, or beside, the requirement (default ``None``).

    Examples:
        >>> bool(RequirementCache("torch>=0.1")), bool(RequirementCache("torch>100.0"))
        (True, False)
        >>> bool(RequirementCache(module="torch.utils")), bool(RequirementCache(module="unknown.module.path"))
        (True, False)
    """

    def __init__(self, requirement: str | None = None, module: str | None = None) -> None:
        if not (requirement or module):
            raise ValueError("At least one arguments need to be set.")
        self.requirement, self.module = requirement, module

    @functools.cached_property
    def _outcome(self) -> tuple[bool, str]:
        available, message = True, ""
        if self.requirement:
            available, message = self._check_requirement(self.requirement)
        if available and self.module:
            available = _module_available(self.module)
            message = (
                f"Module {self.module!r} available"
                if available
                else f"Module not found: {self.module!r}. HINT: Try running `pip install -U {self.module}`"
            )
        return available, message

    def _check_requirement(self, requirement: str) -> tuple[bool, str]:
        name = re.split(r"[<>=!\[;\s]", requirement, maxsplit=1)[0].strip()
        try:
            available = _satisfies(importlib.metadata.version(name), requirement[len(name) :].split(";")[0])
        except importlib.metadata.PackageNotFoundError:
            available = False
        if available:
            return True, f"Requirement {requirement!r} met"
        if not any(c in requirement for c in "=<>") or self.module is not None:
            # "sometimes the metadata fails but the module imports", as Lightning's falls back
            available = _module_available(requirement if self.module is None else self.module)
        return available, f"Requirement {requirement!r} not met. HINT: Try running `pip install -U {requirement!r}`"

    @property
    def available(self) -> bool:
        """Whether the requirement (or module) is there (lightning_utilities' attribute)."""
        return self._outcome[0]

    @property
    def message(self) -> str:
        """What ``str`` says (lightning_utilities' attribute)."""
        return self._outcome[1]

    def __bool__(self) -> bool:
        return self._outcome[0]

    def __str__(self) -> str:
        return self._outcome[1]

    __repr__ = __str__


_Requirement = RequirementCache  # the flags below


def compare_version(package: str, op: Callable[[Any, Any], bool], version: str, use_base_version: bool = False) -> bool:
    """Lightning's ``compare_version``: ``op(installed version, version)`` for an importable
    ``package`` (its ``__version__``, else its distribution's), False where it does not import.

    Examples:
        >>> import operator
        >>> compare_version("torch", operator.ge, "0.1"), compare_version("does_not_exist", operator.ge, "0.0")
        (True, False)
    """
    try:
        module = importlib.import_module(package)
    except (ImportError, RuntimeError):
        return False
    try:
        installed = getattr(module, "__version__", None) or importlib.metadata.version(package)
    except (TypeError, importlib.metadata.PackageNotFoundError):
        return True  # Lightning's answer where the version cannot be read
    try:
        from packaging.version import Version
    except ImportError:  # packaging absent: release numbers compared
        return op(_release(str(installed)), _release(version))
    found = Version(str(installed))
    return op(Version(found.base_version) if use_base_version else found, Version(version))


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
