"""Serialization witness (TL501): a checkpoint that runs code when it is loaded."""

from __future__ import annotations

import libcst as cst

from torchlint import semantics
from torchlint.verify.witness import FROM_FINDING, Code, witness


@witness(
    "TL501",
    """
    import os
    import torch


    class Payload:
        # Unpickling calls open("marker.txt", "w"): harmless, but it is code chosen by the file's author.
        def __reduce__(self):
            return (open, ("marker.txt", "w"))


    torch.save({"weights": torch.zeros(2), "payload": Payload()}, "checkpoint.pt")
    refused = raised(lambda: torch.load("checkpoint.pt"))
    loaded = torch.load("checkpoint.pt", $arguments)
    loaded["payload"].close()
    if os.path.exists("marker.txt"):
        confirmed(f"`torch.load(path, $arguments)` ran code from the checkpoint (it created marker.txt){$note}; the default weights_only=True refuses it: " + describe(refused))
    not_reproduced(f"`torch.load(path, $arguments)` did not run the checkpoint's code")
    """,
    arguments=Code("weights_only=False"),
    note="",
)
def unsafe_torch_load(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    if call is None:
        return entry.canonical("the flagged code is not a torch.load call", site.device)
    weights_only = semantics.keyword(call, "weights_only")
    if weights_only is None:
        # The finding is about torch < 2.6, whose default was weights_only=False.
        return entry.witness(FROM_FINDING, "", site.device, note=" (weights_only=False: the default before torch 2.6)")
    if semantics.literal(weights_only.value) is not False:
        return entry.canonical("weights_only is not a literal", site.device)
    return entry.witness(FROM_FINDING, "", site.device)


@witness(
    "TL502",
    """
    import torch

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    saved = $saved
    torch.save(saved, "checkpoint.pt")
    error = raised(lambda: torch.load("checkpoint.pt"))
    torch.save(model.state_dict(), "weights.pt")
    state = torch.load("weights.pt")
    if type(error).__name__ == "UnpicklingError":
        confirmed(f"`torch.load` of `torch.save({$shown})` with the default weights_only=True: " + describe(error) + f"; a state_dict loads ({len(state)} tensors)")
    not_reproduced(f"`torch.load` of `torch.save({$shown})` with the default: " + describe(error))
    """,
    saved=Code("model"),
    shown="model",
)
def whole_object_checkpoint(site, entry):
    return entry.canonical("a Linear layer stands in for the file's module", site.device)
