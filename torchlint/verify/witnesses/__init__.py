"""Witness programs, one module per rule family; importing this package registers them all."""

from typing import Dict

from torchlint.verify.witness import WITNESSES, Entry
from torchlint.verify.witnesses import api, autograd, data, device, loss, model, serialization  # noqa: F401


def load_all() -> Dict[str, Entry]:
    """The table of every witness by rule code (importing this package filled it)."""
    return WITNESSES
