import os
import re
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.facts import items_iterated
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.loops import iteration
from torchlint.analysis.modules import PARAMETER, ModuleClass, ModuleClasses, is_self_attribute, self_name
from torchlint.analysis.project import PROJECT
from torchlint.analysis.summaries import SUMMARIES, defining_file
from torchlint.analysis.values import Values
from torchlint.engine.walk import walk
from torchlint.rules.base import Rule
from torchlint.rules.model._shared import IN_MODULE_CLASS
from torchlint.rules.triggers import words

# Constructors that return uninitialised memory when given sizes.
_TYPED_CONSTRUCTORS = ("Tensor", "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor")
SIZED_CONSTRUCTORS = frozenset(
    f"{module}.{name}" for module in ("torch", "torch.cuda") for name in _TYPED_CONSTRUCTORS
)
EMPTY = frozenset({"torch.empty"})
# Iterating these or calling these on `self` may initialise every parameter of the class.
_GENERIC_INITS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "apply", "state_dict"})
# Words of a name that holds a size (`hidden_size`, `num_classes`, `out_features`): a single argument named so is
# a size, not data (`torch.Tensor(weights)` copies a list).
_SIZE_WORDS = frozenset({
    "size", "sizes", "dim", "dims", "num", "n", "features", "channels", "width", "height", "length", "len", "classes",
    "heads", "hidden", "units", "planes", "experts", "tokens", "positions", "embed", "d", "k", "out", "in", "shape",
})
_WORD = re.compile(r"[a-z]+")
# `self.reset_parameters()`, `self._init_weights()`, `self.initialize()`: whatever they do, they initialise.
_INITIALISER_NAME = re.compile(r"init|reset")


class UninitializedParameter(Rule):
    """
    ## What it does
    Flags `nn.Parameter(torch.Tensor(sizes...))` (also `torch.FloatTensor`,
    `torch.cuda.FloatTensor` and the other typed constructors) and
    `nn.Parameter(torch.empty(...))` in an `nn.Module` subclass when the class never
    initialises that parameter. Initialising is any of: `nn.init.*(self.w)` or any other
    call given `self.w` outside `forward` (`glorot(self.weight)`), an in-place method on it
    (`self.w.uniform_(...)`, `self.w.data.normal_()`, `.zero_()`, `.fill_()`, `.copy_()`),
    also on a slice of it (`self.w[:n].uniform_()`, `self.w.data[n:].zero_()`,
    `nn.init.zeros_(self.w[:n])`), which writes the parameter through the view,
    an assignment to `self.w.data`, `self.w.data[...]` or `self.w[...]`; and, for every
    parameter of the class, a use of `self.parameters()`/`self.modules()`, a call of
    `self.apply(...)`, or a call of a `self.` method named for initialising
    (`reset_parameters`, `_init_weights`, `initialize`, also an inherited one), and
    another assignment to the attribute. An initialisation of the same attribute name on
    another object anywhere in the file counts too (`module.cls_token.data.normal_()`
    in a parent's `_init_weights`, `nn.init.zeros_(m.bias)` in a function given to
    `model.apply`, `for param in [module.q, module.k]:` in XLNet's).

    Sizes are integer literals, arithmetic, `x.size(...)`, `len(...)`, several
    arguments, or a single name that says it holds a size (`hidden_size`, `num_classes`,
    `dim`). Not flagged: `torch.Tensor([0.5])` and `torch.Tensor(values)` (data, not
    sizes); `torch.zeros/ones/randn/rand`, which initialise.

    Not reported in test files (`test_*.py`, `tests/`), whose modules are stand-ins.

    Initialised in another project file, through `isinstance`, also counts, for the
    attributes that branch initialises: `if isinstance(m, L1BatchNorm2d): m.weight.data.fill_(1)`
    of the class itself, or of a torch class a project file replaces with it
    (`torch.nn.BatchNorm2d = L1BatchNorm2d`, after which an `isinstance(m, nn.BatchNorm2d)`
    init loop initialises the stand-in), also where the class is imported through a file
    that re-exports it (`from norms import L1BatchNorm2d`, where norms.py imports it from
    the class's file). These are looked for in the `.py` files of the
    class's folder and the folders above it up to the project root (at most 100 files) whose
    text names the class (or, for the loop, `isinstance` and the torch class), each read
    through its cached summary.

    Given up for that precision: other initialisation done outside the file (a training
    script that calls `model.apply(init_fn)`, a file in another folder), and weights always
    loaded from a checkpoint, are not seen: such classes are reported.

    ## Why is this bad?
    `torch.Tensor(64, 64)` and `torch.empty(64, 64)` allocate without writing: the
    parameter holds whatever the memory held before. On torch 2.13, right after freeing a
    7.0-filled tensor, `torch.Tensor(64, 64)` held the stale 7.0 values in 102 of 200
    allocations; fresh blocks come back zeroed from the operating system, so the bug is
    intermittent: training starts from zeros (symmetric units that never differ), from
    another tensor's values, or from huge numbers and NaN.

    ## Fix safety
    No fix: which initialisation fits depends on the layer (`nn.init.kaiming_uniform_`
    for weights, zeros for biases); call it in `__init__` or in a `reset_parameters` that
    `__init__` calls.
    """

    code = "TL704"
    name = "uninitialized-parameter"
    triggers = IN_MODULE_CLASS & words("Parameter") & words("empty", *_TYPED_CONSTRUCTORS)
    uses_callgraph = True
    message = (
        "this parameter is never initialised: `torch.Tensor(sizes)`/`torch.empty` return uninitialised memory (stale "
        "values, or NaN), and training starts from it; initialise it (`nn.init.*`) or build it with "
        "`torch.randn`/`torch.zeros`"
    )
    example = """
    import torch
    import torch.nn as nn

    class Bilinear(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.weight = nn.Parameter(torch.Tensor(features, features))  # expect: TL704:36

        def forward(self, x, y):
            return (x @ self.weight * y).sum(-1)
    """
    use_instead = """
    import torch
    import torch.nn as nn

    class Bilinear(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.weight = nn.Parameter(torch.Tensor(features, features))
            nn.init.xavier_uniform_(self.weight)

        def forward(self, x, y):
            return (x @ self.weight * y).sum(-1)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes = ModuleClasses.of(ctx)
        # (the uninitialised factory call, the attribute, module class)
        self.candidates: List[Tuple[cst.Call, str, ModuleClass]] = []
        # Attribute names initialised anywhere in the file: (class id or None for another object, name).
        self.initialised: Set[Tuple[object, str]] = set()
        # (class id, method id, attribute) of `self.w` given to a call: an initialisation outside `forward`.
        self.passed: Set[Tuple[int, int, str]] = set()
        self.generic: Set[int] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        found = self.classes.enclosing(self.ctx.stack)
        for target in node.targets:
            written = target.target
            if found is not None and is_self_attribute(written, found[1]):
                factory = self._uninitialised_factory(node.value)
                if factory is not None:
                    self.candidates.append((factory, written.attr.value, found[0]))
            initialised = _initialised_attribute(written.value if type(written) is cst.Subscript else written, data_only=type(written) is not cst.Subscript)
            if initialised is not None:
                self._note(initialised, found)

    def visit_Call(self, node: cst.Call) -> None:
        found = self.classes.enclosing(self.ctx.stack)
        method = syntax.method_name(node)
        if _in_place(method):
            initialised = _initialised_attribute(_unsliced(node.func.value), data_only=False)
            if initialised is not None:
                self._note(initialised, found)
        if found is None:
            self._note_arguments(node, None)
            return
        module, function = found
        instance = self_name(function)
        receiver = syntax.receiver(node)
        if type(receiver) is cst.Name and receiver.value == instance and method is not None and (
            method in _GENERIC_INITS or _INITIALISER_NAME.search(method.lower())
        ):
            self.generic.add(id(module.node))
        if not self.ctx.qualified_name_in(node.func, PARAMETER):
            self._note_arguments(node, found)

    def visit_For(self, node: cst.For) -> None:
        self._loop(node)

    def visit_While(self, node: cst.While) -> None:
        self._loop(node)

    def _loop(self, node: cst.CSTNode) -> None:
        """`for param in [module.q, module.k, module.v]: param.data.normal_()` (XLNet's `_init_weights`; also beneath
        `enumerate(...)`/`tqdm(...)`, or a `while` stepping `iter([...])`): the attributes listed are initialised one
        by one through the loop variable."""
        looped = iteration(self.ctx, node, self.ctx.stack)
        iterated = items_iterated(looped.iterable, (), self.ctx, looped.evaluated_at)[0] if looped is not None else None
        if type(iterated) in (cst.List, cst.Tuple):
            found = self.classes.enclosing(self.ctx.stack)
            for element in iterated.elements:
                initialised = _initialised_attribute(element.value, data_only=False)
                if initialised is not None:
                    self._note(initialised, found)

    def _note_arguments(self, call: cst.Call, found) -> None:
        # A slice given to an in-place initialiser (`nn.init.zeros_(self.b[:n])`) writes the parameter through the view.
        in_place = _in_place(syntax.terminal_name(call.func))
        for arg in call.args:
            initialised = _initialised_attribute(_unsliced(arg.value) if in_place else arg.value, data_only=False)
            if initialised is None:
                continue
            if found is not None and type(initialised.value) is cst.Name and initialised.value.value == self_name(found[1]):
                self.passed.add((id(found[0].node), id(found[1]), initialised.attr.value))
            else:
                self.initialised.add((None, initialised.attr.value))

    def _note(self, attribute: cst.Attribute, found) -> None:
        is_self = found is not None and type(attribute.value) is cst.Name and attribute.value.value == self_name(found[1])
        self.initialised.add((id(found[0].node) if is_self else None, attribute.attr.value))

    def finish(self) -> None:
        if self.ctx.file_kind is FileKind.TEST:
            return  # a test's module is a stand-in: its parameters' values rarely matter
        for factory, attribute, module in self.candidates:
            if id(module.node) in self.generic or len(module.attributes().get(attribute, [])) > 1:
                continue  # initialised for every parameter, or assigned again (`reset_parameters` making it anew)
            if self._initialised(module, attribute) or self._initialised_as_stand_in(module, attribute):
                continue
            self.report(factory)

    def _initialised(self, module: ModuleClass, attribute: str) -> bool:
        if (None, attribute) in self.initialised or (id(module.node), attribute) in self.initialised:
            return True
        forwards = self.classes.forward_methods(module)
        return any(
            owner == id(module.node) and name == attribute and method not in forwards
            for owner, method, name in self.passed
        )

    def _initialised_as_stand_in(self, module: ModuleClass, attribute: str) -> bool:
        """A project file initialises the attribute on the class's instances through `isinstance`: of the class
        itself (`isinstance(m, L1BatchNorm2d): m.weight.data.fill_(1)`), or of a torch class that a project file
        replaces with it (`torch.nn.BatchNorm2d = L1BatchNorm2d`, then `isinstance(m, nn.BatchNorm2d): ...` where
        torch's name now means the class). Looked for in the files of the class's folder and the folders above it
        (`Project.files_above`), whose text names the class, or `isinstance` and a replaced class."""
        if self.ctx.file_kind is FileKind.NOTEBOOK or module.context is not self.ctx:
            return False
        own = (os.path.abspath(self.ctx.filename), module.node.name.value)
        files = PROJECT.files_above(self.ctx.filename)
        replaced: Set[str] = set()
        for path, facts in self._stand_in_facts(files, module.node.name.value):
            replaced.update(target for value, target in facts[0] if _names(path, value, own, self.ctx.config))
            if any(attribute in attributes and _names(path, checked, own, self.ctx.config) for checked, attributes in facts[1]):
                return True
        for torch_class in replaced:
            for path, facts in self._stand_in_facts(files, torch_class.rpartition(".")[2]):
                if any(checked == torch_class and attribute in attributes for checked, attributes in facts[1]):
                    return True
        return False

    def _stand_in_facts(self, files: List[str], word: str):
        """(path, `_stand_ins` of it) for each of `files` whose text has `word` (and `isinstance`, or an assignment)."""
        pattern = re.compile(rb"\b" + re.escape(word.encode()) + rb"\b")
        for path in files:
            read = PROJECT.read(path)
            if read is None or pattern.search(read[0]) is None or (b"isinstance" not in read[0] and b"=" not in read[0]):
                continue
            facts = SUMMARIES.section(path, self.ctx.config, _STAND_INS, _stand_ins)
            if facts is not None:
                yield path, facts

    def _uninitialised_factory(self, value: cst.BaseExpression):
        """For `nn.Parameter(torch.Tensor(sizes))` / `nn.Parameter(torch.empty(...))`: the factory call."""
        if type(value) is not cst.Call or not self.ctx.qualified_name_in(value.func, PARAMETER):
            return None
        data = syntax.positional(value, 0) or syntax.keyword(value, "data")
        factory = data.value if data is not None else None
        if type(factory) is not cst.Call:
            return None
        if self.ctx.qualified_name_in(factory.func, EMPTY):
            return factory
        if self.ctx.qualified_name_in(factory.func, SIZED_CONSTRUCTORS) and self._sizes(factory):
            return factory
        return None

    def _sizes(self, factory: cst.Call) -> bool:
        """The constructor is given sizes, not data."""
        args = [arg for arg in factory.args if arg.keyword is None]
        if not args:
            return False
        if len(args) > 1 or args[0].star == "*":
            return True
        return self._is_size(args[0].value)

    def _is_size(self, expr: cst.BaseExpression) -> bool:
        if type(expr) in (cst.Integer, cst.BinaryOperation, cst.UnaryOperation):
            return True
        if type(expr) is cst.Call:
            return syntax.method_name(expr) == "size" or (type(expr.func) is cst.Name and expr.func.value in ("len", "int"))
        if type(expr) is cst.Subscript:
            return type(expr.value) is cst.Attribute and expr.value.attr.value == "shape"
        if type(expr) not in (cst.Name, cst.Attribute):
            return False
        origins = Values.of(self.ctx).origins(expr)
        if origins and all(not origin.opaque and type(origin.node) is cst.Integer for origin in origins):
            return True
        name = syntax.terminal_name(expr) or ""
        return not _SIZE_WORDS.isdisjoint(_WORD.findall(name.lower()))


def _in_place(method) -> bool:
    """`uniform_`, `zero_`, `nn.init.normal_`: a method or function named for writing in place."""
    return method is not None and method.endswith("_") and not method.endswith("__")


def _unsliced(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`self.w` for `self.w[:n]` or `self.w[a][b]`: an in-place method on a slice writes the tensor it views."""
    while type(expr) is cst.Subscript:
        expr = expr.value
    return expr


def _initialised_attribute(expr: cst.BaseExpression, data_only: bool):
    """`x.w` for `x.w` or `x.w.data` (with `data_only`, only `x.w.data`): the attribute an initialisation writes."""
    if type(expr) is cst.Attribute and expr.attr.value == "data" and type(expr.value) is cst.Attribute:
        return expr.value
    if not data_only and type(expr) is cst.Attribute:
        return expr
    return None


_STAND_INS = "torch-class-stand-ins"


def _names(path: str, written: str, own: Tuple[str, str], config) -> bool:
    """`written`, a class as the file `path` names it (its import path, or `:Name` for one it defines), is the class
    `own` (its file, its name), also through the files that re-export it (`defining_file`)."""
    if written.startswith(":"):
        return (os.path.abspath(path), written[1:]) == own
    located = defining_file(path, written, config)
    return located is not None and (os.path.abspath(located[0]), located[1]) == own


def _stand_ins(ctx) -> Tuple[Tuple[Tuple[str, str], ...], Tuple[Tuple[str, Tuple[str, ...]], ...]]:
    """What a file says of classes standing in for torch's: each assignment of a class over a torch name, as
    (the class, the torch name: `torch.nn.BatchNorm2d`), and each `if isinstance(m, C):` whose body initialises
    attributes of `m`, as (C, those attributes). A class is its qualified name (`torch.nn.BatchNorm2d`, an import
    path) or `:Name` for one the file defines."""
    replacements: List[Tuple[str, str]] = []
    inits: Dict[str, Set[str]] = {}
    stack: List[cst.CSTNode] = []

    def named(expr: cst.BaseExpression) -> Optional[str]:
        qualified = ctx.qualified_name(expr, stack)
        if qualified is not None:
            return qualified
        return ":" + expr.value if type(expr) is cst.Name else None

    def on_visit(node: cst.CSTNode) -> bool:
        stack.append(node)
        if type(node) is cst.Assign and type(node.value) in (cst.Name, cst.Attribute):
            for target in node.targets:
                replaced = ctx.qualified_name(target.target, stack) if type(target.target) is cst.Attribute else None
                value = named(node.value)
                if replaced is not None and replaced.startswith("torch.") and value is not None:
                    replacements.append((value, replaced))
        elif type(node) is cst.If:
            checked = _isinstance_check(node.test)
            if checked is not None:
                instance, classes = checked
                attributes = _attributes_initialised(node.body, instance)
                for each in classes:
                    name = named(each)
                    if name is not None and attributes:
                        inits.setdefault(name, set()).update(attributes)
        return True

    def on_leave(node: cst.CSTNode) -> None:
        stack.pop()

    walk(ctx.module, on_visit, on_leave)
    return tuple(replacements), tuple((name, tuple(sorted(attributes))) for name, attributes in sorted(inits.items()))


def _isinstance_check(test: cst.BaseExpression) -> Optional[Tuple[str, List[cst.BaseExpression]]]:
    """For `isinstance(m, C)` or `isinstance(m, (C, D))`: the instance's name and the classes written as names."""
    found = syntax.isinstance_test(test)
    if found is None or type(found[0]) is not cst.Name:
        return None
    return found[0].value, [each for each in found[1] if type(each) in (cst.Name, cst.Attribute)]


def _attributes_initialised(body: cst.CSTNode, instance: str) -> Set[str]:
    """The attributes of `instance` that the block initialises: an in-place method on `m.w` or `m.w.data`
    (`m.weight.data.fill_(1)`), an in-place function given it (`nn.init.constant_(m.weight, 0)`), an assignment to
    `m.w.data`."""
    found: Set[str] = set()

    def note(expr: Optional[cst.Attribute]) -> None:
        if expr is not None and type(expr.value) is cst.Name and expr.value.value == instance:
            found.add(expr.attr.value)

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Call:
            method = syntax.method_name(node)
            if _in_place(method) and type(node.func) is cst.Attribute:
                note(_initialised_attribute(_unsliced(node.func.value), data_only=False))
            if _in_place(syntax.terminal_name(node.func)):
                for arg in node.args:
                    note(_initialised_attribute(_unsliced(arg.value), data_only=False))
        elif type(node) is cst.Assign:
            for target in node.targets:
                note(_initialised_attribute(target.target, data_only=True))
        return type(node) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda)

    walk(body, on_visit, lambda node: None)
    return found
