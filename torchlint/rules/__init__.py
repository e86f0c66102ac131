"""The rule catalogue: every `Rule` subclass found under this package.

There is no central list to edit: adding a module with a rule class under a
family folder (`autograd/`, `device/`, `data/`, `loss/`, `model/`, `serialization/`,
`api/`) registers it.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Dict, Tuple, Type

from torchlint.rules.base import Rule


@lru_cache(maxsize=None)
def all_rules() -> Tuple[Type[Rule], ...]:
    for module in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        importlib.import_module(module.name)
    found = {}
    pending = list(Rule.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "code", None):
            other = found.setdefault(cls.code, cls)
            if other is not cls:
                raise RuntimeError(f"{cls.code} is defined twice: {other.__module__} and {cls.__module__}")
    return tuple(found[code] for code in sorted(found))


@lru_cache(maxsize=None)
def rules_by_code() -> Dict[str, Type[Rule]]:
    return {rule.code: rule for rule in all_rules()}
