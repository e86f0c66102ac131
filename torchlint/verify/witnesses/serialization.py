"""Serialization witnesses: a checkpoint that runs code when it is loaded (TL501), checkpoints a weights-only load refuses (TL502, TL503)."""

from __future__ import annotations

import re

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
        confirmed(f"`torch.load(path, $arguments)` ran code from the checkpoint (it created marker.txt){$default_note}; the default weights_only=True refuses it: " + describe(refused))
    not_reproduced(f"`torch.load(path, $arguments)` did not run the checkpoint's code")
    """,
    arguments=Code("weights_only=False"),
    default_note="",
)
def unsafe_torch_load(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    if call is None:
        return entry.canonical("the flagged code is not a torch.load call", site.device)
    weights_only = semantics.keyword(call, "weights_only")
    if weights_only is None:
        # The finding is about torch < 2.6, whose default was weights_only=False.
        return entry.witness(FROM_FINDING, "", site.device, default_note=" (weights_only=False: the default before torch 2.6)")
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


# What stands in for each refused value TL503 names, by the global its message quotes, and the plain value its remedy
# saves instead. A class of the project stands in as a class of the same name defined in the witness.
_REFUSED_STAND_INS = {
    "argparse.Namespace": ("argparse.Namespace(lr=0.1)", "vars(argparse.Namespace(lr=0.1))"),
    "types.SimpleNamespace": ("types.SimpleNamespace(lr=0.1)", "vars(types.SimpleNamespace(lr=0.1))"),
    "numpy._core.multiarray.scalar": ("numpy.mean([0.5, 0.25])", "numpy.mean([0.5, 0.25]).item()"),
    "numpy._core.multiarray._reconstruct": ("numpy.zeros(3)", "numpy.zeros(3).tolist()"),
    "pathlib.PosixPath": ("pathlib.Path('runs')", "str(pathlib.Path('runs'))"),
    "functools.partial": ("functools.partial(int, '1')", "('int', '1')"),
    "collections.defaultdict": ("collections.defaultdict(int)", "dict(collections.defaultdict(int))"),
    "datetime.datetime": ("datetime.datetime(2020, 1, 1)", "datetime.datetime(2020, 1, 1).isoformat()"),
    "frozenset": ("frozenset({1})", "set(frozenset({1}))"),
}
_QUOTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL (?P<name>[\w.<> ]+?)`")


@witness(
    "TL503",
    """
    import argparse, collections, datetime, functools, pathlib, re, types
    import torch
    $imports
    $definition
    torch.save({"weights": torch.zeros(2), "value": $value}, "checkpoint.pt")
    error = raised(lambda: torch.load("checkpoint.pt"))
    torch.save({"weights": torch.zeros(2), "value": $plain}, "plain.pt")
    plain = torch.load("plain.pt")
    refused = re.search(r"Unsupported global: GLOBAL [\\w.]+", str(error))
    if type(error).__name__ == "UnpicklingError" and refused and refused.group(0).endswith($global_name):
        loads = "`" + $plain_shown + "` loads (" + type(plain["value"]).__name__ + ")"
        confirmed("`torch.load` of a checkpoint holding `" + $shown + "` with the default weights_only=True: UnpicklingError: " + refused.group(0) + "; " + loads)
    not_reproduced("`torch.load` of a checkpoint holding `" + $shown + "` with the default: " + describe(error))
    """,
    imports=Code(""),
    definition=Code(""),
    value=Code("argparse.Namespace(lr=0.1)"),
    plain=Code("vars(argparse.Namespace(lr=0.1))"),
    shown="argparse.Namespace(lr=0.1)",
    plain_shown="vars(argparse.Namespace(lr=0.1))",
    global_name="argparse.Namespace",
)
def refused_checkpoint_value(site, entry):
    if not site.finding.message.startswith("`torch.save`"):
        return entry.canonical("the load of a file saved with a Namespace; the canonical save stands in", site.device)
    quoted = _QUOTED_GLOBAL.search(site.finding.message)
    name = quoted.group("name") if quoted else ""
    if name.startswith("<its module>."):
        # `class Config` of the project: a class of that name, defined in the witness, stands in.
        class_name = name.rpartition(".")[2]
        value, plain = f"{class_name}()", f"vars({class_name}())"
        return entry.canonical(
            f"a class named `{class_name}` stands in for the project's", site.device,
            definition=Code(f"class {class_name}:\n    def __init__(self):\n        self.lr = 0.1\n"),
            value=Code(value), plain=Code(plain), shown=value, plain_shown=plain, global_name=f".{class_name}",
        )
    if name not in _REFUSED_STAND_INS:
        return entry.canonical(f"no stand-in for `{name or '?'}`: a Namespace stands in", site.device)
    value, plain = _REFUSED_STAND_INS[name]
    needs_numpy = Code("require('numpy')\nimport numpy") if value.startswith("numpy") else Code("")
    return entry.canonical(
        f"`{value}` stands in for the saved value", site.device,
        imports=needs_numpy, value=Code(value), plain=Code(plain), shown=value, plain_shown=plain, global_name=name,
    )
