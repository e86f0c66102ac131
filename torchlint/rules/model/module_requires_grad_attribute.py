from typing import List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.facts import items_iterated
from torchlint.analysis.modules import MODULE_ONLY_METHODS, ModuleClasses, self_name, tested_as_tensor
from torchlint.analysis.values import Values
from torchlint.engine.scopes import dotted_name, scope_nodes_of
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes

# Methods only a Module has (a tensor has none of them): a name they are called on is a model.
# Iterating these gives modules (the last element for the named ones).
_MODULE_ITERATORS = frozenset({"modules", "children", "named_modules", "named_children"})


class ModuleRequiresGradAttribute(Rule):
    """
    ## What it does
    Flags `module.requires_grad = False` (or `True`) where the receiver is an `nn.Module`:
    a value built from a torch layer or container, a model builder
    (`torchvision.models.*`, `timm.create_model`, `*.from_pretrained`) or a Module
    class of the file or of a project file (`from model import Net`); `self` in a
    method of a Module class; `self.encoder` or `model.encoder` when the class assigns
    that attribute a module; a loop variable over `model.modules()`/`children()`
    (`named_modules()`, `named_children()`); or a name on which the same function calls a
    method only Modules have (`parameters()`, `modules()`, `children()`, `eval()`,
    `register_buffer()`, ...).

    Not flagged: `param.requires_grad = False` on tensors and parameters (also in `for p
    in model.parameters():`), `module.requires_grad_(False)`, receivers whose origin
    is not known (a function parameter the function only reads attributes of), and an
    assignment that runs only where an `isinstance` test around it makes the receiver a
    tensor: in the body of `if isinstance(m, nn.Parameter):` (or `torch.Tensor`) or the
    `else` of `if isinstance(m, nn.Module):`, a loop over a mix of modules and parameters
    (held-out round 58).

    ## Why is this bad?
    `requires_grad` is a tensor attribute. On a module, the assignment only adds a Python
    attribute of that name: on torch 2.13 every parameter still has `requires_grad=True`
    afterwards (4 of 4 in a small model), so the "frozen" layers keep training and
    computing gradients. `module.requires_grad_(False)` sets the flag on each parameter.

    ## Fix safety
    Unsafe: `module.requires_grad = False` becomes `module.requires_grad_(False)`, which
    freezes the parameters: training changes (that is the intent), and code reading the
    attribute `module.requires_grad` afterwards no longer finds it. Offered for a literal
    `True`/`False` assigned in a statement of its own.
    """

    code = "TL706"
    name = "module-requires-grad-attribute"
    triggers = attributes("requires_grad")
    call_parts = MODULE_ONLY_METHODS
    fix_safety = "unsafe"
    message = (
        "`requires_grad` is a tensor attribute: set on a module it only adds a Python attribute, and every parameter "
        "keeps `requires_grad=True` and keeps training; call `.requires_grad_(False)` on the module"
    )
    example = """
    import torchvision

    model = torchvision.models.resnet18()
    model.requires_grad = False  # expect: TL706:1
    model.fc.requires_grad_(True)
    """
    use_instead = """
    import torchvision

    model = torchvision.models.resnet18()
    model.requires_grad_(False)
    model.fc.requires_grad_(True)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes = ModuleClasses.of(ctx)
        # (innermost scope id, written receiver) of calls of Module-only methods.
        self.module_receivers: Set[Tuple[int, str]] = set()
        self.assignments: List[Tuple[cst.Attribute, cst.Assign, tuple]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if syntax.method_name(node) in MODULE_ONLY_METHODS:
            written = dotted_name(node.func.value)
            if written is not None:
                self.module_receivers.add((id(self._scope(self.ctx.stack)), written))

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            written = target.target
            if type(written) is cst.Attribute and written.attr.value == "requires_grad":
                self.assignments.append((written, node, tuple(self.ctx.stack)))

    def finish(self) -> None:
        for target, statement, stack in self.assignments:
            if self._is_module(target.value, stack) and not tested_as_tensor(self.ctx, target.value, stack):
                value = syntax.literal(statement.value)
                shown = value if isinstance(value, bool) else False
                self.report(target, self.message.replace("(False)", f"({shown})"), self._fix(target, statement))

    def _is_module(self, expr: cst.BaseExpression, stack: tuple) -> bool:
        written = dotted_name(expr)
        if written is not None and (id(self._scope(stack)), written) in self.module_receivers:
            return True
        if self._is_self_of_module(expr, stack) or self._iterates_modules(expr, stack):
            return True
        if type(expr) is cst.Attribute and self._is_submodule(expr, stack):
            return True
        return any(
            type(origin.node) is cst.Call and not origin.applied
            and ModuleClasses.of(origin.place.context).builds_module(origin.node, origin.place.stack)
            for origin in Values.of(self.ctx).origins(expr, stack)
        )

    def _is_self_of_module(self, expr: cst.BaseExpression, stack: tuple) -> bool:
        found = self.classes.enclosing(stack)
        return found is not None and type(expr) is cst.Name and expr.value == self_name(found[1])

    def _iterates_modules(self, expr: cst.BaseExpression, stack: tuple) -> bool:
        """`m` of `for m in model.modules():` (`for name, m in model.named_children():`, beneath `enumerate(...)` or
        `tqdm(...)`, or `m = next(modules)` after `modules = iter(model.modules())`): every binding of it reaching here."""
        if type(expr) is not cst.Name:
            return False
        values = Values.of(self.ctx)
        place = values.place(stack)
        found = values.bindings(expr, place)
        if found is None or not found[1]:
            return False
        for binding in found[1]:
            items = values.items_bound(binding, place.scopes)
            if items is None:
                return False
            iterated, element = items_iterated(items[0], binding.element, items[1].context, items[1].stack)
            method = syntax.method_name(iterated) if type(iterated) is cst.Call else None
            if method not in _MODULE_ITERATORS or element != ((1,) if method.startswith("named_") else ()):
                return False
        return True

    def _is_submodule(self, expr: cst.Attribute, stack: tuple) -> bool:
        """`self.encoder` / `model.encoder` where the class of `self`/`model` assigns `encoder` a module."""
        for owner in self._owner_classes(expr.value, stack):
            for value in owner.attributes().get(expr.attr.value, []):
                method = owner.assigning_method(value)
                there = ModuleClasses.of(owner.context)
                if type(value) is cst.Call and method is not None and there.builds_module(value, owner.stack_of(method)):
                    return True
        return False

    def _owner_classes(self, expr: cst.BaseExpression, stack: tuple):
        found = self.classes.enclosing(stack)
        if found is not None and type(expr) is cst.Name and expr.value == self_name(found[1]):
            return [found[0]]
        owners = []
        for origin in Values.of(self.ctx).origins(expr, stack):
            if type(origin.node) is not cst.Call or origin.applied:
                continue
            for built in Values.of(origin.place.context).origins(origin.node.func, origin.place.stack):
                if type(built.node) is cst.ClassDef:
                    module = ModuleClasses.of(built.place.context).module_class(built.node, built.place.scopes)
                    if module is not None:
                        owners.append(module)
        return owners

    def _scope(self, stack) -> cst.CSTNode:
        return scope_nodes_of(stack)[-1]

    def _fix(self, target: cst.Attribute, statement: cst.Assign) -> Optional[Fix]:
        value = syntax.literal(statement.value)
        if len(statement.targets) != 1 or not isinstance(value, bool):
            return None
        content = f"{self.ctx.code(target.value)}.requires_grad_({value})"
        return Fix.unsafe(f"Call `.requires_grad_({value})`", self.ctx.replace(statement, content))
