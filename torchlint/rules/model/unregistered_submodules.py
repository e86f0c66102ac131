from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.modules import (
    PARAMETER, REGISTERING_CONTAINERS, STATELESS_LAYERS, ModuleClass, ModuleClasses, is_loss_class, is_self_attribute,
    runs_in_builder,
)
from torchlint.analysis.project import PROJECT
from torchlint.analysis.summaries import SUMMARIES
from torchlint.analysis.values import Values
from torchlint.engine.context import last_parts
from torchlint.engine.scopes import dotted_name, scope_nodes_of
from torchlint.engine.walk import walk
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.model._shared import IN_MODULE_CLASS

# Module methods that register what they are given (`for i, layer in enumerate(self.layers): self.add_module(...)`).
_REGISTERING_METHODS = frozenset({"add_module", "register_module", "register_parameter"})
_FILLING_METHODS = frozenset({"append", "extend", "insert", "update", "setdefault"})
_CONTAINER_BUILTINS = frozenset({"list", "tuple", "dict"})


class UnregisteredSubmodules(Rule):
    """
    ## What it does
    Flags an attribute of an `nn.Module` subclass assigned a plain Python container that
    holds layers or `nn.Parameter`s: a list, tuple or dict literal (`self.layers =
    [nn.Linear(4, 4), nn.Linear(4, 4)]`, `self.heads = {"a": nn.Linear(4, 2)}`), a
    comprehension (`[Block(dim) for _ in range(depth)]`), `list(...)`/`tuple(...)` of
    one, a list multiplied (`[nn.Linear(4, 4)] * 3`), or an empty list or dict filled
    in the class (`self.blocks = []` then `self.blocks.append(nn.Conv2d(...))`,
    `self.blocks += [...]` or `self.blocks = self.blocks + [...]`), also
    through a local variable (`layers = [...]; self.layers = layers`). A layer is a
    torch layer or container, a model builder's result, or an instance of a Module class
    of the file or of a project file (`from model import Block`); the class itself may
    derive from a Module class of another project file.

    Not flagged: `nn.ModuleList`, `nn.ModuleDict`, `nn.ParameterList`,
    `nn.ParameterDict`, `nn.Sequential`; containers of ints, strings, shapes, functions
    or layer classes (`[nn.ReLU, nn.Tanh]`); containers holding only layers without
    parameters or train/eval behaviour (`[nn.ReLU(), nn.MaxPool2d(2)]`), or instances
    of Module classes of the project that hold neither (every attribute such a layer, a
    number, a parameter the class never calls, or another such class: a moving-average
    wrapper around `nn.AvgPool1d`), or only loss modules; a list that is also passed to a registering container (`nn.ModuleList(
    layers)`, `nn.Sequential(*self.layers)`) built while the model is built or assigned to
    the module (one built in `forward` and called there, `nn.Sequential(*self.layers)(x)`,
    registers nothing), or an attribute the class assigns such a
    container elsewhere; a list or tuple written out whose every element is registered
    by its index while the model is built, given to such a container (`nn.Sequential(
    self.layers[0], nn.ReLU(), self.layers[1])`) or assigned to an attribute; classes that register by hand (`add_module`,
    `register_module`, `register_parameter`, `setattr(self, ...)` anywhere in the
    class); attributes of classes that are not Modules; elements that are the module's
    own attributes (`self.blocks = [self.b1, self.b2]`): assigning `self.b1` a layer
    registered it, and the list only aliases it (wrapping it in `nn.ModuleList` would
    add a second copy of each key to `state_dict()`); a container read only while the
    model is built (in `__init__`, or in a method the file calls only from there): a
    table of candidate backbones that `__init__` picks one from (`self.backbone =
    self.backbones[name]`) registers the one picked through the attribute it is given,
    and the others never run. A container nothing reads is still flagged, and so is one
    a file importing the class's module reads (`model.towers` in evaluate.py).

    Given up for that precision: layers built by a function torchlint cannot follow
    (a parameter such as `norm_layer(dim)`, a function of an installed library), and
    classes deriving from a Module class of another library (`transformers`,
    `timm`): they are not known to be Modules.

    ## Why is this bad?
    `nn.Module` registers a submodule or parameter only when it is assigned directly to
    an attribute, or held by one of its containers. Layers in a plain list are invisible
    to the module: on torch 2.13 `parameters()` does not return them, so the optimizer
    never updates them (their `.grad` fills, `step()` skips them); `.to()`, `.cuda()`,
    `.double()` leave them where they were (a device mismatch on GPU); `eval()` leaves
    them in training mode; and `state_dict()` does not save them. No error says so.

    ## Fix safety
    Unsafe: wraps the list in `nn.ModuleList(...)` (`nn.ParameterList` for
    parameters, `nn.ModuleDict` for a dict with string keys). That changes what
    `parameters()` and `state_dict()` hold: an optimizer built from them now trains
    the layers, and checkpoints saved before the fix lack their keys. Offered for
    list and dict literals and comprehensions assigned directly, when the file
    imports `torch.nn` or `torch`.
    """

    code = "TL701"
    name = "unregistered-submodules"
    triggers = IN_MODULE_CLASS
    call_parts = _REGISTERING_METHODS | _FILLING_METHODS | {"setattr"} | last_parts(REGISTERING_CONTAINERS)
    fix_safety = "unsafe"
    uses_callgraph = True
    message = (
        "these layers sit in a plain Python container, which `nn.Module` does not register: `parameters()` misses "
        "them (the optimizer never trains them), `.to()`/`.cuda()`/`.double()` and `eval()` skip them and "
        "`state_dict()` does not save them; use `nn.ModuleList` (`nn.ModuleDict` for a dict)"
    )
    example = """
    import torch.nn as nn

    class MLP(nn.Module):
        def __init__(self, width, depth):
            super().__init__()
            self.hidden = [nn.Linear(width, width) for _ in range(depth)]  # expect: TL701:9
            self.out = nn.Linear(width, 1)

        def forward(self, x):
            for layer in self.hidden:
                x = layer(x).relu()
            return self.out(x)
    """
    use_instead = """
    import torch.nn as nn

    class MLP(nn.Module):
        def __init__(self, width, depth):
            super().__init__()
            self.hidden = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
            self.out = nn.Linear(width, 1)

        def forward(self, x):
            for layer in self.hidden:
                x = layer(x).relu()
            return self.out(x)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes = ModuleClasses.of(ctx)
        # Candidate assignments: (target, value, module class, method, stack).
        self.assignments: List[Tuple[cst.Attribute, cst.BaseExpression, ModuleClass, cst.FunctionDef, tuple]] = []
        # (class id, written name) -> what the class puts into that container: `self.blocks.append(layer)`.
        self.filled: Dict[Tuple[int, str], List[Tuple[cst.BaseExpression, tuple]]] = {}
        # (class id, written name) of containers a registering container or call is given.
        self.registered: Set[Tuple[int, str]] = set()
        # (class id, written name) -> the indices of its elements registered one by one: given to a registering
        # container (`nn.Sequential(self.layers[0], nn.ReLU(), self.layers[1])`) or assigned to an attribute.
        self.registered_elements: Dict[Tuple[int, str], Set[int]] = {}
        # ids of classes that register by hand.
        self.registering_classes: Set[int] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        # Most assignments bind plain names: only `self.x = ...` and `self.x[k] = ...` are asked where they are.
        if all(type(target.target) not in (cst.Attribute, cst.Subscript) for target in node.targets):
            return
        found = self.classes.enclosing(self.ctx.stack)
        if found is None:
            return
        module, method = found
        for target in node.targets:
            written = target.target
            if is_self_attribute(written, method):
                self.assignments.append((written, node.value, module, method, tuple(self.ctx.stack)))
                if runs_in_builder(self.ctx, self.ctx.stack):  # not in `forward`: after the optimizer took its parameters
                    self._register_element(node.value, module)
            elif type(written) is cst.Subscript:  # self.heads["a"] = nn.Linear(4, 2)
                name = dotted_name(written.value)
                if name is not None:
                    self.filled.setdefault((id(module.node), name), []).append((node.value, tuple(self.ctx.stack)))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        """`self.layers += [Layer(...)]` fills the list as `append` does."""
        if type(node.operator) is not cst.AddAssign or type(node.value) not in (cst.List, cst.Tuple, cst.ListComp):
            return
        found = self.classes.enclosing(self.ctx.stack)
        if found is None or not is_self_attribute(node.target, found[1]):
            return
        written = self.ctx.code(node.target)
        held = self._held(node.value, found[0], tuple(self.ctx.stack), written)
        if held is not None:
            self.filled.setdefault((id(found[0].node), written), []).extend(held[0])

    def visit_Call(self, node: cst.Call) -> None:
        method = syntax.method_name(node)
        registers = method in _REGISTERING_METHODS or (type(node.func) is cst.Name and node.func.value == "setattr")
        container = not registers and method not in _FILLING_METHODS and self.ctx.qualified_name_in(node.func, REGISTERING_CONTAINERS)
        if not (registers or container or method in _FILLING_METHODS):
            return
        found = self.classes.enclosing(self.ctx.stack)
        if found is None:
            return
        module = found[0]
        if registers:
            self.registering_classes.add(id(module.node))
        elif container and self._kept(node):
            for arg in node.args:
                name = dotted_name(arg.value)
                if name is not None:
                    self.registered.add((id(module.node), name))
                elif type(arg.value) in (cst.List, cst.Tuple):  # nn.ModuleList([self.layers[0], self.layers[1]])
                    for element in arg.value.elements:
                        self._register_element(element.value, module)
                else:
                    self._register_element(arg.value, module)
        else:
            name = dotted_name(node.func.value)
            if name is not None:
                filled = self.filled.setdefault((id(module.node), name), [])
                filled += [(arg.value, tuple(self.ctx.stack)) for arg in node.args if arg.keyword is None]

    def _register_element(self, value: cst.BaseExpression, module: ModuleClass) -> None:
        """`value`, registered by where it is given, may be one element of a container: `self.layers[0]`."""
        if type(value) is not cst.Subscript or len(value.slice) != 1 or type(value.slice[0].slice) is not cst.Index:
            return
        name = dotted_name(value.value)
        index = syntax.literal(value.slice[0].slice.value)
        if name is not None and type(index) is int:
            self.registered_elements.setdefault((id(module.node), name), set()).add(index)

    def _kept(self, container: cst.Call) -> bool:
        """The registering container is itself registered: built while the model is built (in `__init__`, or a
        helper it calls: `self.net = nn.Sequential(*layers)`, `return nn.ModuleList(blocks)`) or assigned to the
        module. One built in `forward` and called there (`nn.Sequential(*self.layers)(x)`) is made afresh on every
        call and registers nothing (pix2pix's blocks in Mastering-PyTorch: 0 parameters)."""
        stack = self.ctx.stack
        if runs_in_builder(self.ctx, stack):
            return True
        parent = stack[-2] if len(stack) > 1 else None
        return type(parent) is cst.Assign and parent.value is container and any(
            type(target.target) is cst.Attribute for target in parent.targets
        )

    def finish(self) -> None:
        by_attribute: Dict[Tuple[int, str], List[Tuple[cst.BaseExpression, tuple]]] = {}
        for target, value, module, _, stack in self.assignments:
            by_attribute.setdefault((id(module.node), target.attr.value), []).append((value, stack))
        # (target, value, what it holds, where) for each container that holds layers or parameters
        found: List[Tuple[cst.Attribute, cst.BaseExpression, Set[str], tuple]] = []
        for target, value, module, method, stack in self.assignments:
            if id(module.node) in self.registering_classes:
                continue
            written = self.ctx.code(target)
            if (id(module.node), written) in self.registered:
                continue
            # `_held` rules out most values by their shape alone: asked before the attribute's other assignments are
            # resolved.
            held = self._held(value, module, stack, written)
            if held is None:
                continue
            others = by_attribute[(id(module.node), target.attr.value)]
            if any(self._registers(other, other_stack) for other, other_stack in others):
                continue
            layers, local = held
            if local is not None and (id(module.node), local) in self.registered:
                continue
            if self._each_element_registered(value, layers, (id(module.node), written)):
                continue
            kinds = set(filter(None, (self._layer_kind(layer, layer_stack) for layer, layer_stack in layers)))
            if kinds:
                found.append((target, value, kinds, stack))
        # One walk of the file for every attribute about to be reported.
        built_only = self._read_only_while_built({target.attr.value for target, _, _, _ in found}) if found else set()
        for target, value, kinds, stack in found:
            if target.attr.value not in built_only:
                self.report(target, self._message(target, value, kinds), self._fix(value, kinds, stack))

    def _each_element_registered(
        self, value: cst.BaseExpression, layers: List[Tuple[cst.BaseExpression, tuple]], key: Tuple[int, str],
    ) -> bool:
        """A list or tuple written out, never filled, whose every element the class registers by its index (`self.fc =
        nn.Sequential(self.noisy_layers[0], nn.ReLU(), self.noisy_layers[1])`): the container only aliases them."""
        indices = self.registered_elements.get(key)
        if not indices or type(value) not in (cst.List, cst.Tuple) or len(layers) != len(value.elements):
            return False
        count = len(layers)
        return {index % count for index in indices if -count <= index < count} == set(range(count))

    def _read_only_while_built(self, attributes: Set[str]) -> Set[str]:
        """The names among `attributes` whose every read in the file (`self.x`, `model.x`) is in code that runs only
        while a model is built: a table of candidate backbones that `__init__` picks one from (`self.backbone =
        self.backbones[name]`, which registers the one picked). The others never run, so that they are not
        registered changes nothing. An attribute never read is not among them."""
        # name -> whether each read runs only while a model is built
        reads: Dict[str, List[bool]] = {}
        stores: Set[int] = set()
        stack: List[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> bool:
            stack.append(node)
            node_type = type(node)
            # Filling the container (`self.x = ...`, `self.x[k] = ...`, `self.x += ...`, `self.x.append(...)`) is
            # not reading it.
            if node_type is cst.Assign:
                for target in node.targets:
                    written = target.target
                    stores.add(id(written.value if type(written) is cst.Subscript else written))
                    if type(written) is cst.Attribute and type(node.value) is cst.BinaryOperation:
                        # `self.x = self.x + [...]` grows it
                        grown = dotted_name(written)
                        stores.update(id(side) for side in (node.value.left, node.value.right) if dotted_name(side) == grown)
            elif node_type is cst.AnnAssign or node_type is cst.AugAssign:
                stores.add(id(node.target))
            elif node_type is cst.Attribute:
                if node.attr.value in _FILLING_METHODS:
                    stores.add(id(node.value))
                elif node.attr.value in attributes and id(node) not in stores:
                    reads.setdefault(node.attr.value, []).append(runs_in_builder(self.ctx, stack))
            return True

        walk(self.ctx.module, on_visit, lambda node: stack.pop())
        return {name for name, built in reads.items() if all(built)} - self._read_by_importers()

    def _read_by_importers(self) -> Set[str]:
        """The attribute names read in the files that import this one, or re-export it (`Project.importers_around`:
        `model.towers` in main.py, of a model built from a class of this file); none when those are not known."""
        found: Set[str] = set()
        for path in PROJECT.importers_around(self.ctx.filename):
            found.update(SUMMARIES.section(path, self.ctx.config, _ATTRIBUTES_READ, _attributes_read) or ())
        return found

    def _message(self, target: cst.Attribute, value: cst.BaseExpression, kinds: Set[str]) -> str:
        held = "parameters" if kinds == {"parameter"} else "layers"
        container = {cst.Dict: "dict", cst.DictComp: "dict", cst.Tuple: "tuple"}.get(type(value), "list")
        suggested = ("ParameterDict" if held == "parameters" else "ModuleDict") if container == "dict" else (
            "ParameterList" if held == "parameters" else "ModuleList"
        )
        return (
            f"`{self.ctx.code(target)}` holds {held} in a plain {container}, which `nn.Module` does not register: "
            "`parameters()` misses them (the optimizer never trains them), `.to()`/`.cuda()`/`.double()` and "
            f"`eval()` skip them and `state_dict()` does not save them; use `nn.{suggested}`"
        )

    def _registers(self, value: cst.BaseExpression, stack: tuple) -> bool:
        """The attribute is (also) assigned a registering container, a module or a parameter."""
        if type(value) is not cst.Call:
            return False
        return self.ctx.qualified_name_in(value.func, REGISTERING_CONTAINERS | PARAMETER, stack) or bool(
            self.classes.builds_module(value, stack)
        )

    def _held(
        self, value: cst.BaseExpression, module: ModuleClass, stack: tuple, written: str, depth: int = 0,
    ) -> Optional[Tuple[List[Tuple[cst.BaseExpression, tuple]], Optional[str]]]:
        """The elements a plain container assigned as `value` holds (with where they are evaluated), and the local
        name it came through; None when `value` is not a plain container."""
        value_type = type(value)
        if value_type in (cst.List, cst.Tuple, cst.Set):
            if any(type(element) is cst.StarredElement for element in value.elements):
                return None
            elements = [(element.value, stack) for element in value.elements]
        elif value_type is cst.Dict:
            elements = [(element.value, stack) for element in value.elements if type(element) is cst.DictElement]
        elif value_type in (cst.ListComp, cst.SetComp, cst.GeneratorExp):
            elements = [(value.elt, stack)]
        elif value_type is cst.DictComp:
            elements = [(value.value, stack)]
        elif value_type is cst.BinaryOperation and type(value.operator) is cst.Add and depth < 2:
            # `self.layers = self.layers + [Layer(...)]`: the list added; the attribute's own elements were found at
            # the assignments that gave them.
            sides = [
                self._held(side, module, stack, written, depth + 1)
                for side in (value.left, value.right)
                if not (type(side) is cst.Attribute and self.ctx.code(side) == written)
            ]
            if not sides or any(side is None for side in sides):
                return None
            return [element for side in sides for element in side[0]], None
        elif value_type is cst.BinaryOperation and type(value.operator) is cst.Multiply:
            container = value.left if type(value.left) is cst.List else value.right
            return self._held(container, module, stack, written, depth) if type(container) is cst.List else None
        elif value_type is cst.Call and self._is_container_builtin(value, stack) and value.args and depth < 2:
            return self._held(value.args[0].value, module, stack, written, depth + 1)
        elif value_type is cst.Name and depth < 2:
            return self._through_name(value, module, stack, written, depth)
        else:
            return None
        return elements + self.filled.get((id(module.node), written), []), None

    def _through_name(self, name: cst.Name, module: ModuleClass, stack: tuple, written: str, depth: int):
        """`layers = [...]` (filled or not) then `self.layers = layers`: the local list's elements."""
        origins = Values.of(self.ctx).origins(name, stack)
        if len(origins) != 1 or origins[0].opaque or origins[0].place.context is not self.ctx:
            return None
        held = self._held(origins[0].node, module, origins[0].place.stack, name.value, depth + 1)
        if held is None:
            return None
        return held[0] + self.filled.get((id(module.node), written), []), name.value

    def _is_container_builtin(self, call: cst.Call, stack: tuple) -> bool:
        func = call.func
        return (
            type(func) is cst.Name and func.value in _CONTAINER_BUILTINS and len(call.args) == 1
            and self.ctx.scopes.binding_scope(func.value, scope_nodes_of(stack)) is None
        )

    def _layer_kind(self, element: cst.BaseExpression, stack: tuple) -> Optional[str]:
        """"module" or "parameter" for an element that is a layer with state or a parameter, else None."""
        if type(element) is cst.Attribute and type(element.value) is cst.Name and element.value.value == "self":
            # `self.b1`: a layer held by an attribute was registered when it was assigned; the list only aliases it.
            return None
        # The element itself, and what it comes from (`Layer(...).to(device)` is the layer: `.to` returns self).
        calls = ([element] if type(element) is cst.Call else []) + [
            origin.node for origin in Values.of(self.ctx).origins(element, stack)
            if type(origin.node) is cst.Call and origin.node is not element and origin.place.context is self.ctx
            and not origin.applied
        ]
        for call in calls:
            if self.ctx.qualified_name_in(call.func, PARAMETER, stack):
                return "parameter"
            built = self.classes.builds_module(call, stack)
            if built == "class" and self.classes.builds_stateless_class(call, stack):
                continue
            if built and built not in STATELESS_LAYERS and not is_loss_class(built):
                return "module"
        return None

    def _fix(self, value: cst.BaseExpression, kinds: Set[str], stack: tuple) -> Optional[Fix]:
        torch_nn = self._torch_nn(stack)
        if torch_nn is None or len(kinds) != 1:
            return None
        parameters = kinds == {"parameter"}
        if type(value) in (cst.List, cst.ListComp):
            container = "ParameterList" if parameters else "ModuleList"
        elif type(value) is cst.Dict and value.elements and all(
            type(element) is cst.DictElement and isinstance(syntax.literal(element.key), str) for element in value.elements
        ):
            container = "ParameterDict" if parameters else "ModuleDict"
        else:
            return None
        content = f"{torch_nn}.{container}({self.ctx.code(value)})" if _has_elements(value) else f"{torch_nn}.{container}()"
        return Fix.unsafe(f"Hold them in `{torch_nn}.{container}`", self.ctx.replace(value, content))

    def _torch_nn(self, stack: tuple) -> Optional[str]:
        """How the code at `stack` can name `torch.nn`: `nn` after `import torch.nn as nn`, `torch.nn` after
        `import torch`."""
        for candidate in ("nn", "torch.nn"):
            if self.ctx.qualified_name(cst.parse_expression(candidate), stack) == "torch.nn":
                return candidate
        return None


_ATTRIBUTES_READ = "attributes-read"


def _attributes_read(ctx) -> Tuple[str, ...]:
    """The names of the attributes the file reads (`model.towers`), not those it only assigns (a section of its
    summary)."""
    found: Set[str] = set()
    assigned: Set[int] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.AssignTarget or type(node) is cst.AnnAssign or type(node) is cst.AugAssign:
            assigned.add(id(node.target))
        elif type(node) is cst.Attribute and id(node) not in assigned:
            found.add(node.attr.value)
        return True

    walk(ctx.module, on_visit, lambda node: None)
    return tuple(sorted(found))


def _has_elements(value: cst.BaseExpression) -> bool:
    return type(value) is cst.ListComp or bool(value.elements)
