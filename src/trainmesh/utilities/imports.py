"""Lightning's ``utilities.imports``: which optional packages are installed, under Lightning 2.6's
names (``_TORCHVISION_AVAILABLE``, ``_RICH_AVAILABLE``, ...), so that a program that reads them
(``if _TORCHVISION_AVAILABLE: import torchvision``) ports by renaming its import.

A flag is true where the distribution is installed at a version the requirement allows, as
``lightning_utilities``' ``RequirementCache`` answers (it reads the installed metadata; importing
the package is not tried).

>>> bool(RequirementCache("torch>=2.0"))
True
>>> bool(RequirementCache("surely-not-an-installed-package"))
False
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys

from trainmesh.utilities.rank_zero import rank_zero_warn

__all__ = ["RequirementCache"]


class RequirementCache:
    """Whether a requirement (``"name"``, ``"name>=1.2"``, ``"name>=1,<2"``) is met by the installed
    distributions; true or false as ``bool(...)``, with ``message`` saying why not.

    Args:
        requirement: a PEP 508 requirement string.
        module: accepted for ``lightning_utilities``' signature; the answer reads the distribution.

    Examples:
        >>> req = RequirementCache("torch>=999")
        >>> bool(req), "torch" in req.message
        (False, True)
    """

    def __init__(self, requirement: str, module: str | None = None) -> None:
        self.requirement = requirement
        self.module = module

    @functools.cached_property
    def _answer(self) -> tuple[bool, str]:
        name = re.split(r"[<>=!~;\[ ]", self.requirement, maxsplit=1)[0]
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return False, f"Requirement {self.requirement!r} not met: {name} is not installed."
        specifier = self.requirement[len(name) :].strip()
        if specifier:
            # packaging reads the specifier as pip does; without it, presence alone is checked.
            try:
                from packaging.specifiers import SpecifierSet
            except ImportError:  # pragma: no cover - packaging comes with pip's environments
                return True, f"Requirement {self.requirement!r} met (version not checked: no packaging)."
            if not SpecifierSet(specifier).contains(version, prereleases=True):
                return False, f"Requirement {self.requirement!r} not met: {name} {version} is installed."
        return True, f"Requirement {self.requirement!r} met."

    def __bool__(self) -> bool:
        return self._answer[0]

    @property
    def message(self) -> str:
        """Why the requirement is (not) met."""
        return self._answer[1]

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"RequirementCache({self.requirement!r})"


_IS_WINDOWS = sys.platform == "win32"
_PYTHON_GREATER_EQUAL_3_11_0 = sys.version_info[:2] >= (3, 11)
_TORCH_GREATER_EQUAL_2_6 = RequirementCache("torch>=2.6.0")
_TORCH_GREATER_EQUAL_2_8 = RequirementCache("torch>=2.8.0")
_TORCH_EQUAL_2_8 = RequirementCache("torch>=2.8.0,<2.9.0")
_TORCH_EQUAL_2_9 = RequirementCache("torch>=2.9.0,<2.10.0")
_TORCHMETRICS_GREATER_EQUAL_0_8_0 = RequirementCache("torchmetrics>=0.8.0")
_TORCHMETRICS_GREATER_EQUAL_0_9_1 = RequirementCache("torchmetrics>=0.9.1")
_TORCHMETRICS_GREATER_EQUAL_0_11 = RequirementCache("torchmetrics>=0.11.0")
_TORCHMETRICS_GREATER_EQUAL_1_0_0 = RequirementCache("torchmetrics>=1.0.0")
_OMEGACONF_AVAILABLE = RequirementCache("omegaconf")
_TORCHVISION_AVAILABLE = RequirementCache("torchvision")
_RICH_AVAILABLE = RequirementCache("rich>=10.2.2")


@functools.lru_cache(maxsize=128)
def _try_import_module(module_name: str) -> bool:
    try:
        __import__(module_name)
        return True
    # AttributeError too: a package whose import fails half-way (as Lightning catches it)
    except (ImportError, AttributeError) as err:
        rank_zero_warn(f"Import of {module_name} package failed for some compatibility issues:\n{err}")
        return False
