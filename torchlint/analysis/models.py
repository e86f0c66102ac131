"""Models as the rules mean them: values built from a user `nn.Module` subclass, `nn.Sequential` or a model builder,
or names on which `.eval()`, `.train()` or `.parameters()` is called (`Models`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Set

import libcst as cst

from torchlint import semantics
from torchlint.analysis.losses import CRITERION_NAME, is_loss_module
from torchlint.analysis.modules import ModuleClasses, is_loss_class
from torchlint.analysis.values import IDENTITY_WRAPPERS, SEQUENTIAL, Values
from torchlint.engine.scopes import dotted_name

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

_MODEL_BUILDERS = ("torchvision.models.", "timm.create_model", "torch.hub.load")
_MODULE_BASES = ("LightningModule", "PreTrainedModel")


class Models:
    """What the spec calls a model: built from a user `nn.Module` subclass, `nn.Sequential` or a
    model builder, or a name on which `.eval()`, `.train()` or `.parameters()` is called.

    Fed from the walk (`observe_class`, `observe_call`); ask `is_model` in `finish()`.
    """

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.classes: Set[str] = set()
        self.mode_receivers: Set[str] = set()

    def observe_class(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
            name = self.ctx.qualified_name(value) or ""
            local = dotted_name(value)
            torch_module = name.startswith("torch.nn.") and not is_loss_module(name)
            if torch_module or name.endswith(_MODULE_BASES) or local in self.classes:
                self.classes.add(node.name.value)
                return

    def observe_call(self, node: cst.Call) -> None:
        if semantics.method_name(node) in ("eval", "train", "parameters"):
            receiver = dotted_name(semantics.receiver(node))
            if receiver:
                self.mode_receivers.add(receiver)

    def is_model(self, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
        name = dotted_name(expr)
        if name is None:
            return False
        terminal = semantics.terminal_name(expr) or ""
        if CRITERION_NAME.match(terminal.lower()):
            return False
        if built_as_model(expr, self.ctx, stack):
            return True
        for value in reversed(self.ctx.assigned_values(expr, stack)):
            verdict = self._built_as_model(value, stack)
            if verdict is not None:
                return verdict
        return name in self.mode_receivers

    def _built_as_model(self, value: cst.BaseExpression, stack) -> Optional[bool]:
        """True/False when the assigned value tells, None to look at an earlier assignment (`model = model.to(device)`)."""
        if not isinstance(value, cst.Call):
            return None
        if isinstance(value.func, cst.Name) and value.func.value in self.classes:
            return True
        qualified = self.ctx.qualified_name(value.func, stack)
        if qualified in IDENTITY_WRAPPERS:  # `nn.DataParallel(model)`, `torch.compile(Net())`: the model it wraps
            wrapped = semantics.positional(value, 0) or semantics.keyword(value, "module")
            return self._built_as_model(wrapped.value, stack) if wrapped is not None else None
        if qualified is not None:
            if is_loss_module(qualified):
                return False
            return (
                qualified == "torch.nn.Sequential"
                or qualified.startswith(_MODEL_BUILDERS)
                or qualified.endswith(".from_pretrained")
            )
        if semantics.method_name(value) == "from_pretrained":
            return True
        return None


def built_as_model(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    """Some value `expr` may hold is built as a model (a Module class of the file or of a project file, a container
    or a model builder; not a torch layer or loss), followed through parameters, `self.x` and imports."""
    for origin in Values.of(ctx).origins(expr, stack):
        if type(origin.node) is cst.Call and not origin.applied and not origin.opaque:
            built = ModuleClasses.of(origin.place.context).builds_module(origin.node, origin.place.stack)
            if built is not None and not is_loss_class(built) and (not built.startswith("torch.nn.") or built in SEQUENTIAL):
                return True
    return False
