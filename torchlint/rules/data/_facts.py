"""Fact recognizers of the data-loading family (see `torchlint.engine.facts` and `torchlint.analysis.facts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import libcst as cst

from torchlint.analysis.facts import worker_loader_in
from torchlint.engine.facts import recognizes, recognizes_when_asked

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


@recognizes_when_asked(cst.CompFor, "starts-workers")
def comprehension_iterates_worker_loader(node: cst.CompFor, ctx: "FileContext", stack: Tuple[cst.CSTNode, ...]) -> bool:
    """`[batch for batch in loader]` iterates the loader like a `for` statement does."""
    return worker_loader_in(node.iter, ctx, stack) is not None


@recognizes(cst.Call, frozenset({"set_epoch"}))
def sets_sampler_epoch(node: cst.Call, ctx: "FileContext") -> Optional[str]:
    """`sampler.set_epoch(epoch)`, also `loader.sampler.set_epoch(epoch)`: reseeds a DistributedSampler's shuffle."""
    return "sets-epoch" if type(node.func) is cst.Attribute and node.func.attr.value == "set_epoch" else None
