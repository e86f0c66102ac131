"""Witness programs, one module per rule family; importing this package registers them all."""

from torchlint.verify.witnesses import autograd, data, device, loss, serialization  # noqa: F401
