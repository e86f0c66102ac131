"""The code a finding points at, seen the way a witness builder needs it.

A `Site` parses the file once, finds the node the finding reports (the deepest
node whose range is exactly the finding's), and answers the questions builders
ask: the qualified name of a call through the file's imports, the literal
keyword arguments of a call, and whether an expression may be executed: every
call in it must be on the allow-list (torch's own namespaces and methods of
tensors, modules and optimizers) or a stand-in the witness defines.
"""

from __future__ import annotations

from typing import Callable, Collection, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from torchlint import semantics
from torchlint.engine.context import FileContext
from torchlint.finding import Finding
# The allow-list itself lives with the fork server, which also judges names on the live objects.
from torchlint.verify.zygote import forbidden_name, static_refusal

# `name -> why it may not run, or None`: the fork server's judgement on the live objects.
Resolver = Callable[[str], Optional[str]]
# Builtins that reach code, files, frames or other objects' internals; refused wherever they appear.
DANGEROUS_BUILTINS = frozenset({
    "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals", "vars", "dir",
    "breakpoint", "help", "exit", "quit", "type", "object", "super", "memoryview", "classmethod",
    "staticmethod", "property", "print",
})
# Names a witness's own helpers use: an import from the checked file may not rebind them.
WITNESS_NAMES = frozenset({
    "confirmed", "not_reproduced", "skipped", "require", "raised", "resolve", "warnings_of", "describe",
    "host_allocations", "cuda_allocations", "DEVICE", "VERDICT_MARK", "json", "re", "sys", "warnings",
})
# Methods of tensors, modules, optimizers and loaders that compute in memory only.
SAFE_METHODS = frozenset({
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "long", "int", "type", "clone", "detach",
    "requires_grad_", "sum", "mean", "backward", "item", "view", "reshape", "softmax", "log_softmax", "sigmoid",
    "unsqueeze", "squeeze", "flatten", "permute", "transpose", "contiguous", "numpy", "tolist",
    "parameters", "zero_grad", "step", "train", "eval", "append", "stack",
})


class ParsedFile:
    """One file parsed once for all its findings: nodes by exact range, and each node's parent."""

    def __init__(self, ctx: FileContext, resolver: Optional[Resolver] = None):
        self.ctx = ctx
        self.resolver = resolver
        self.by_range: Dict[tuple, List[cst.CSTNode]] = {}
        positions = MetadataWrapper(ctx.module, unsafe_skip_copy=True).resolve(PositionProvider)
        for node, code_range in positions.items():
            key = (code_range.start.line, code_range.start.column, code_range.end.line, code_range.end.column)
            self.by_range.setdefault(key, []).append(node)
        self.parents: Dict[int, cst.CSTNode] = {}
        pending = [ctx.module]
        while pending:
            node = pending.pop()
            for child in node.children:
                self.parents[id(child)] = node
                pending.append(child)

    @classmethod
    def parse(cls, filename: str, text: str, config, resolver: Optional[Resolver] = None) -> Optional["ParsedFile"]:
        try:
            module = cst.parse_module(text)
        except Exception:  # the linter already reported an unparsable file as TL000
            return None
        return cls(FileContext(filename, text, module, config), resolver)

    def dotted_names(self) -> Set[str]:
        """The qualified names of every name and attribute chain in the file that the spelling allows:
        what the fork server is asked about in one batch before the file's findings are planned."""
        names = set()
        for node, _ in _chains(self.ctx.module, self.parents):
            name = self.ctx.qualified_name(node, list(reversed(self.ancestors(node))) + [node])
            if name is not None and static_refusal(name) is None:
                names.add(name)
        return names

    def site(self, finding: Finding, device: str) -> Optional["Site"]:
        """The finding's node: the deepest node whose range is exactly the finding's."""
        key = (finding.location.row, finding.location.column - 1, finding.end_location.row, finding.end_location.column - 1)
        candidates = self.by_range.get(key, [])
        found = None
        for node in candidates:
            if found is None or any(parent is found for parent in self.ancestors(node)):
                found = node
        return Site(self, finding, found, device) if found is not None else None

    def ancestors(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """Enclosing nodes, innermost first."""
        chain = []
        parent = self.parents.get(id(node))
        while parent is not None:
            chain.append(parent)
            parent = self.parents.get(id(parent))
        return chain


class Site:
    def __init__(self, file: ParsedFile, finding: Finding, node: cst.CSTNode, device: str):
        self.file = file
        self.finding = finding
        self.ctx = file.ctx
        self.node = node
        self.device = device
        # Names judged allowed for this finding's witness: judged again, on the live objects,
        # in the witness's process before its program runs.
        self.checked: Set[str] = set()

    def ancestors(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        return self.file.ancestors(node)

    def stack(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """The engine's stack for `node`: outermost first, the node last."""
        return list(reversed(self.ancestors(node))) + [node]

    def enclosing(self, node: cst.CSTNode, *types) -> Optional[cst.CSTNode]:
        for parent in self.ancestors(node):
            if isinstance(parent, types):
                return parent
        return None

    def qualified_name(self, node: cst.CSTNode) -> Optional[str]:
        return self.ctx.qualified_name(node, self.stack(node))

    def code(self, node: cst.CSTNode) -> str:
        return self.ctx.code(node).strip()

    # ------------------------------------------------------------ the allow-list

    def is_allowed_callable(self, name: Optional[str]) -> bool:
        """Whether the qualified name may be called (or passed on) in a witness: allowed by its
        spelling and, where the fork server is running, by the live object it reaches."""
        if name is None or static_refusal(name) is not None:
            return False
        if self.file.resolver is not None and self.file.resolver(name) is not None:
            return False
        self.checked.add(name)
        return True

    def blocked_call(self, expr: cst.CSTNode, stand_ins: Sequence[str] = (), also_allowed: Collection[str] = ()) -> Optional[str]:
        """The first call or reference in `expr` that may not run in a witness (its source), or None when all may.

        Every call must reach an allow-listed torch callable, a stand-in the witness defines,
        or an in-memory method of a value (`SAFE_METHODS`); every chain of names that reaches
        through the file's imports must reach an allow-listed torch callable or value (a
        function passed as `collate_fn` runs as surely as one called); no attribute may be
        private or special (`x.__class__`); no builtin that reaches code, files or frames may
        appear. `also_allowed`: qualified names one witness may call besides torch's (numpy's
        array producers).
        """
        for call in _calls(expr):
            if not self._call_allowed(call, stand_ins, also_allowed):
                return self.code(call.func)
        for node, is_callee in _chains(expr, self.file.parents):
            if not self._reference_allowed(node, is_callee, stand_ins, also_allowed):
                return self.code(node)
        return None

    def _call_allowed(self, call: cst.Call, stand_ins: Sequence[str], also_allowed: Collection[str]) -> bool:
        if isinstance(call.func, cst.Name) and call.func.value in stand_ins:
            return True
        name = self.qualified_name(call.func)
        if name is not None:
            return name in also_allowed or self.is_allowed_callable(name)
        # A method call on a value (not on an imported module): only in-memory tensor/module methods.
        return isinstance(call.func, cst.Attribute) and call.func.attr.value in SAFE_METHODS and self.qualified_name(call.func.value) is None

    def _reference_allowed(self, node: cst.CSTNode, is_callee: bool, stand_ins: Sequence[str], also_allowed: Collection[str]) -> bool:
        chain = _chain_names(node)
        if any(part.startswith("_") for part in chain):
            return False
        if isinstance(node, cst.Name) and node.value in stand_ins:
            return True
        name = self.qualified_name(node)
        if name is None:
            # A value of the witness's (a stand-in, a local) and its public attributes, or a builtin
            # (`f(x).eval` is a method, not the builtin).
            return not (_rooted_at_name(node) and chain[0] in DANGEROUS_BUILTINS)
        return is_callee or name in also_allowed or self.is_allowed_callable(name)

    # ------------------------------------------------------------ arguments

    def literal_arguments(self, call: cst.Call, skip_first: bool = False) -> Tuple[Optional[List[str]], List[str]]:
        """(source of the literal arguments, kept in order; names of the dropped non-literal keywords).

        None instead of the list when a positional argument (after the first, if
        skipped) is not a literal or `*args`/`**kwargs` are passed: dropping it would
        shift the others.
        """
        kept, dropped = [], []
        positional_index = 0
        for arg in call.args:
            if arg.star:
                return None, dropped
            if arg.keyword is None:
                positional_index += 1
                if skip_first and positional_index == 1:
                    continue
                if semantics.is_missing(semantics.literal(arg.value)):
                    return None, dropped
                kept.append(self.code(arg.value))
            elif semantics.is_missing(semantics.literal(arg.value)):
                dropped.append(arg.keyword.value)
            else:
                kept.append(f"{arg.keyword.value}={self.code(arg.value)}")
        return kept, dropped

    def torch_imports(self) -> str:
        """The file's module-level imports of torch modules, so that its own names resolve in a witness."""
        return self.imports(("torch",))

    def imports(self, roots: Sequence[str]) -> str:
        """The file's module-level imports of the packages `roots` (plain imports and `from` imports)."""
        lines = []
        for statement in self.ctx.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not self._import_allowed(small):
                    continue
                if isinstance(small, cst.Import) and all(
                    _dotted(alias.name).split(".")[0] in roots for alias in small.names
                ):
                    lines.append(self.code(small))
                elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative and (
                    _dotted(small.module).split(".")[0] in roots and not isinstance(small.names, cst.ImportStar)
                ):
                    lines.append(self.code(small))
        lines += self._star_bound_imports(roots)
        return "\n".join(lines) + ("\n" if lines else "")

    def _star_bound_imports(self, roots: Sequence[str]) -> List[str]:
        """Imports that give a witness the names the file takes from a star import of a project module (`np` after
        `from common import *`, when common.py does `import numpy as np`), for the packages `roots`."""
        bound = self.ctx.scopes.star_bound()
        if not bound:
            return []
        used = {node.value for node in _names(self.ctx.module)}
        lines = []
        for name in sorted(used & bound.keys()):
            path = bound[name]
            if path.split(".")[0] not in roots:
                continue
            parent, _, last = path.rpartition(".")
            line = f"from {parent} import {last} as {name}" if parent else f"import {path} as {name}"
            if self._import_allowed(cst.parse_statement(line).body[0]):
                lines.append(line)
        return lines

    def _import_allowed(self, small: cst.CSTNode) -> bool:
        """An import the witness may repeat: of an allowed module or name, binding no name a witness relies on."""
        if isinstance(small, cst.Import):
            targets = [(_dotted(alias.name), alias) for alias in small.names]
        elif isinstance(small, cst.ImportFrom) and small.module is not None and not isinstance(small.names, cst.ImportStar):
            targets = [(f"{_dotted(small.module)}.{_dotted(alias.name)}", alias) for alias in small.names]
        else:
            return False
        for target, alias in targets:
            if alias.asname is not None:
                bound = _dotted(alias.asname.name)
            else:
                bound = target.split(".")[0] if isinstance(small, cst.Import) else _dotted(alias.name)
            if bound in WITNESS_NAMES or bound in DANGEROUS_BUILTINS or bound.startswith("_"):
                return False
            # Importing a torch module runs only torch's code; what the file then calls is judged call by call.
            if target.split(".")[0] == "torch" and forbidden_name(target) is not None:
                return False
        return True

    def free_names(self, node: cst.CSTNode) -> set:
        """Names used in `node` that are not imports: values defined elsewhere that a witness lacks."""
        free = set()
        pending = [node]
        while pending:
            child = pending.pop()
            pending.extend(child.children)
            if not isinstance(child, cst.Name) or child.value in ("True", "False", "None"):
                continue
            parent = self.ancestors(child)[0] if self.ancestors(child) else None
            if isinstance(parent, cst.Attribute) and parent.attr is child:
                continue
            if isinstance(parent, cst.Arg) and parent.keyword is child:
                continue
            if self.qualified_name(child) is None:
                free.add(child.value)
        return free

    def calls_in_file(self) -> List[cst.Call]:
        return list(_calls(self.ctx.module))


def is_device_name(name: str) -> bool:
    """`device`, `dev`, `target_device`: names a stand-in device can replace."""
    return "dev" in name.lower()


def _dotted(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _chain_names(node: cst.CSTNode) -> List[str]:
    """`a.b.c` as ["a", "b", "c"]; a chain on a value (`f(x).b`) as the attributes only."""
    names = []
    while isinstance(node, cst.Attribute):
        names.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        names.append(node.value)
    return list(reversed(names))


def _rooted_at_name(node: cst.CSTNode) -> bool:
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _chains(root: cst.CSTNode, parents: Dict[int, cst.CSTNode]):
    """(node, whether it is called) for every outermost chain of names and attributes under `root`."""
    pending = [root]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.Name, cst.Attribute)):
            parent = parents.get(id(node))
            inner = isinstance(parent, cst.Attribute) and (parent.value is node or parent.attr is node)
            labels = (isinstance(parent, cst.Arg) and parent.keyword is node) or (isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef)) and parent.name is node)
            if not inner and not labels:
                yield node, isinstance(parent, cst.Call) and parent.func is node
        pending.extend(node.children)


def _names(root: cst.CSTNode):
    return _nodes_of(root, cst.Name)


def _calls(root: cst.CSTNode):
    return _nodes_of(root, cst.Call)


def _nodes_of(root: cst.CSTNode, kind: type):
    """The nodes of type `kind` in `root`, in source order, without recursion (code may nest deeply)."""
    pending = [root]
    while pending:
        node = pending.pop()
        if isinstance(node, kind):
            yield node
        pending.extend(reversed(node.children))
