"""Witness programs, one module per rule family; importing this package registers them all."""

from torchlint.verify.witnesses import api, autograd, data, device, loss, serialization  # noqa: F401
