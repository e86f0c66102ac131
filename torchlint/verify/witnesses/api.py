"""API witnesses (TL6xx): removed, deprecated and private names, typos, and imprecise formulas.

The table rules (TL601, TL602, TL605) name a torch API; their witnesses resolve that
name in the installed torch (`resolve`, as code reaches it) and call it with small
stand-in arguments from `PROBES`, or with the finding's own call when every part
of it may run. A deprecated name is confirmed by the warning torch gives, or,
where torch gives none, by the deprecation its own docstring states, and the
evidence says which. A name whose message says torch is silent about it (an
`observed` entry of the table) is confirmed by that silence and by what the
message says the name does instead.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.engine.scopes import dotted_name
from torchlint.rules.api._losses import LEGACY_KEYWORDS, legacy_reduction
from torchlint.rules.api._table import lookup
from torchlint.rules.api.checkpoint_without_use_reentrant import keywords_passed_on
from torchlint.rules.api.log1p import is_one, single_argument
from torchlint.verify.witness import FROM_FINDING, Code, witness

# Arguments that make each table name do its work, with the stand-ins of `_STAND_INS`.
# Names absent here (modules, classes compared rather than called) are only resolved.
PROBES = {
    "torch.solve": "(B, A)",
    "torch.symeig": "(A)",
    "torch.utils.serialization.load_lua": "('model.t7')",
    "torch.lstsq": "(B, A)",
    "torch.matrix_rank": "(A)",
    "torch.eig": "(A)",
    "torch.cuda.amp.autocast": "()",
    "torch.cuda.amp.GradScaler": "()",
    "torch.cpu.amp.autocast": "()",
    "torch.cpu.amp.GradScaler": "()",
    "torch.cuda.amp.custom_fwd": "(torch.sin)",
    "torch.cuda.amp.custom_bwd": "(torch.sin)",
    "torch.chain_matmul": "(A, A)",
    "torch.cholesky": "(A)",
    "torch.qr": "(A)",
    "torch.svd": "(A)",
    "torch.lu": "(A)",
    "torch.lu_solve": "(B, *torch.linalg.lu_factor(A))",
    "torch.triangular_solve": "(B, A.triu())",
    "torch.norm": "(A)",
    "torch.ger": "(v, v)",
    "torch.range": "(0, 3)",
    "torch.nn.functional.upsample": "(image, scale_factor=2)",
    "torch.nn.functional.upsample_nearest": "(image, scale_factor=2)",
    "torch.nn.functional.upsample_bilinear": "(image, scale_factor=2)",
    "torch.nn.UpsamplingNearest2d": "(scale_factor=2)",
    "torch.nn.UpsamplingBilinear2d": "(scale_factor=2)",
    "torch.nn.NLLLoss2d": "()",
    "torch.nn.utils.weight_norm": "(torch.nn.Linear(3, 3))",
    "torch.nn.utils.clip_grad_norm": "(torch.nn.Linear(3, 3).parameters(), 1.0)",
    "torch.nn.init.normal": "(torch.empty(3, 3))",
    "torch.nn.init.uniform": "(torch.empty(3, 3))",
    "torch.nn.init.constant": "(torch.empty(3, 3), 0.5)",
    "torch.nn.init.xavier_uniform": "(torch.empty(3, 3))",
    "torch.nn.init.xavier_normal": "(torch.empty(3, 3))",
    "torch.nn.init.kaiming_uniform": "(torch.empty(3, 3))",
    "torch.nn.init.kaiming_normal": "(torch.empty(3, 3))",
    "torch.nn.init.orthogonal": "(torch.empty(3, 3))",
    "torch.nn.utils.stateless.functional_call": "(torch.nn.Linear(3, 3), {}, (A,))",
    "torch.backends.cuda.sdp_kernel": "()",
    "torch.autograd.Variable": "(A)",
    "torch.testing.assert_allclose": "(A, A)",
    "torch.set_default_tensor_type": "(torch.FloatTensor)",
    "torch.cuda.memory_cached": "()",
    "torch.cuda.max_memory_cached": "()",
    "torch.utils._pytree._register_pytree_node": "(Pair, lambda pair: ([], None), lambda values, context: Pair())",
    "functorch.vmap": "(torch.sin)",
    "functorch.grad": "(torch.sin)",
    "functorch.grad_and_value": "(torch.sin)",
    "functorch.vjp": "(torch.sin, v)",
    "functorch.jvp": "(torch.sin, (v,), (v,))",
    "functorch.jacrev": "(torch.sin)",
    "functorch.jacfwd": "(torch.sin)",
    "functorch.hessian": "(torch.sin)",
    "functorch.functionalize": "(torch.sin)",
    "functorch.make_functional": "(torch.nn.Linear(3, 3))",
    "functorch.make_functional_with_buffers": "(torch.nn.Linear(3, 3))",
    "functorch.combine_state_for_ensemble": "([torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)])",
    "torch.utils.data._utils.collate.default_collate": "([A, A])",
    "torch.utils.data._utils.collate.default_convert": "(A)",
}

_STAND_INS = '''
torch.manual_seed(0)
A = torch.randn(3, 3, dtype=torch.float64)
A = A @ A.T + 3 * torch.eye(3, dtype=torch.float64)  # symmetric positive definite: every factorisation works
B = torch.randn(3, 1, dtype=torch.float64)
v = torch.randn(3)
image = torch.ones(1, 1, 2, 2)


class Pair:
    pass
'''


# For each deprecated name whose message says torch neither warns nor documents the deprecation
# (`observed` in the table): source, run after the warning and the docstring are read, that ends
# in a verdict on the message's own claims, the silence and what the name really does.
SILENT_BEHAVIOUR = {
    "torch.autograd.Variable": """
if said or sentence:
    not_reproduced(f"`{shown}` is no longer silent: " + (describe(said[0]) if said else f'its docstring says "{sentence[:200]}"'))
source = torch.ones(2, requires_grad=True)
alias, leaf = target(source), target(source, requires_grad=True)
with torch.no_grad():
    source[0] = 5.0  # seen through the alias only if it shares the storage
facts = [
    f"`Variable(x)` of an x that requires grad returns a plain `{type(alias).__module__}.{type(alias).__name__}`",
    f"not x itself: {alias is not source}",
    f"sharing x's storage: {alias[0].item() == 5.0}",
    f"requires_grad={alias.requires_grad}, grad_fn={alias.grad_fn}",
    f"`Variable(x, requires_grad=True)` is a new leaf: {leaf is not source and leaf.is_leaf and leaf.requires_grad}",
    f"`isinstance(torch.ones(1), Variable)`: {isinstance(torch.ones(1), target)}",
]
evidence = f"`{shown}` gave no warning ({describe(error)}) and its docstring is silent; " + "; ".join(facts)
detached_alias = (type(alias) is torch.Tensor and alias is not source and alias[0].item() == 5.0
                  and not alias.requires_grad and alias.grad_fn is None)
if detached_alias and leaf.is_leaf and leaf.requires_grad and isinstance(torch.ones(1), target):
    confirmed(evidence)
not_reproduced(evidence)
""",
}


def _referenced_name(site) -> Optional[str]:
    """The qualified name the flagged import or reference reaches."""
    node = site.node
    if isinstance(node, cst.ImportAlias):
        owner = site.enclosing(node, cst.ImportFrom, cst.Import)
        if isinstance(owner, cst.ImportFrom) and owner.module is not None and not owner.relative:
            return f"{dotted_name(owner.module)}.{dotted_name(node.name)}"
        return dotted_name(node.name)
    return site.qualified_name(node)


def _probe(site, name: str):
    """(call source, shown call, preamble, origin, note): the finding's own call when it may run, else the table's probe."""
    parent = site.ancestors(site.node)[0] if site.ancestors(site.node) else None
    if isinstance(parent, cst.Call) and parent.func is site.node and site.blocked_call(parent) is None and not site.free_names(parent):
        return site.code(parent), site.code(parent), site.torch_imports(), FROM_FINDING, ""
    entry = lookup(name)
    arguments = PROBES.get(entry.name) if entry is not None and name == entry.name else None
    if arguments is None:
        return f"resolve({name!r})", name, "", None, f"`{name}` resolved in the installed torch"
    return f"resolve({name!r}){arguments}", f"{name}{arguments}", "", None, f"`{name}` called with stand-in arguments"


def _table_witness(site, entry, **extra):
    name = _referenced_name(site)
    if name is None or lookup(name) is None:
        return entry.canonical("the flagged name could not be resolved", site.device)
    call, shown, preamble, origin, note = _probe(site, name)
    values = dict(name=name, call=Code(call), shown=shown, **extra)
    if origin == FROM_FINDING:
        return entry.witness(FROM_FINDING, "", site.device, preamble=preamble, **values)
    return entry.canonical(note, site.device, **values)


@witness(
    "TL601",
    """
    import torch
    $stand_ins
    name, shown = $name, $shown
    error = raised(lambda: $call)
    # A TypeError would mean the stand-in arguments are wrong, not that the API is gone.
    if error is not None and not isinstance(error, TypeError):
        confirmed(f"`{shown}`: " + describe(error))
    not_reproduced(f"`{shown}` in torch {torch.__version__}: " + describe(error))
    """,
    stand_ins=Code(_STAND_INS),
    name="torch.solve",
    call=Code("resolve('torch.solve')(B, A)"),
    shown="torch.solve(B, A)",
)
def removed_api(site, entry):
    return _table_witness(site, entry)


@witness(
    "TL602",
    """
    import inspect
    import re
    import torch
    $stand_ins
    name, shown = $name, $shown
    target = resolve(name)
    caught, error = warnings_of(lambda: $call)
    said = [message for message in caught if "deprecat" in str(message).lower() or "renamed" in str(message).lower()]
    documentation = " ".join((inspect.getdoc(target) or "").split())
    sentence = next((part for part in re.split(r"(?<=\\.) ", documentation) if "deprecat" in part.lower()), "")
    $silent_behaviour
    if said:
        confirmed(f"`{shown}` warns " + describe(said[0]))
    if sentence:
        confirmed(f"`{shown}` ran without a warning ({describe(error)}); torch's docstring of `{name}`: \\"{sentence[:200]}\\"")
    not_reproduced(f"`{shown}` gave no deprecation warning ({describe(error)}) and the docstring of `{name}` does not call it deprecated")
    """,
    stand_ins=Code(_STAND_INS),
    name="torch.cuda.amp.autocast",
    call=Code("resolve('torch.cuda.amp.autocast')()"),
    shown="torch.cuda.amp.autocast()",
    silent_behaviour=Code(""),
)
def deprecated_api(site, entry):
    name = _referenced_name(site)
    table_entry = lookup(name) if name is not None else None
    behaviour = SILENT_BEHAVIOUR.get(table_entry.name, "") if table_entry is not None else ""
    return _table_witness(site, entry, silent_behaviour=Code(behaviour))


@witness(
    "TL603",
    """
    import torch

    shown, value = $shown, $value
    if value:
        weights = torch.zeros(3)
        weights.require_grad = True
        error = raised(lambda: (weights * 2).sum().backward())
        if not weights.requires_grad:
            confirmed(f"`{shown}`: requires_grad stays {weights.requires_grad}; backward: " + describe(error))
        not_reproduced(f"`{shown}`: requires_grad became {weights.requires_grad}")
    layer = torch.nn.Linear(3, 1)
    for parameter in layer.parameters():
        parameter.require_grad = False
    layer(torch.ones(1, 3)).sum().backward()
    if layer.weight.requires_grad and layer.weight.grad is not None:
        confirmed(f"`{shown}` on a Linear's parameters: requires_grad stays True and backward fills weight.grad: the layer still trains")
    not_reproduced(f"`{shown}`: requires_grad={layer.weight.requires_grad}, grad filled: {layer.weight.grad is not None}")
    """,
    shown="weights.require_grad = True",
    value=True,
)
def requires_grad_typo(site, entry):
    statement = site.enclosing(site.node, cst.Assign, cst.AnnAssign)
    value = _assigned_value(site, statement) if statement is not None else None
    shown = f"{site.code(site.node)} = {site.code(value)}" if value is not None else site.code(site.node)
    literal = semantics.literal(value) if value is not None else None
    if not isinstance(literal, bool):
        return entry.canonical("the assigned value is not a literal True or False", site.device, shown=f"{shown} (as True)")
    return entry.canonical(f"the assigned value {literal} taken from the file, on a stand-in tensor or layer", site.device,
                           shown=shown, value=literal)


def _assigned_value(site, statement) -> Optional[cst.BaseExpression]:
    """The value assigned to the flagged target, element by element through tuple unpacking."""
    value = statement.value
    targets = [statement.target] if isinstance(statement, cst.AnnAssign) else [target.target for target in statement.targets]
    for target in targets:
        if target is site.node:
            return value
        if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
            for element, assigned in zip(target.elements, value.elements):
                if element.value is site.node:
                    return assigned.value
    return None


@witness(
    "TL604",
    """
    import torch
    import torch.utils.checkpoint

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    hidden = torch.randn(2, 4)  # an input that does not require grad, as after a frozen stem
    shown = $shown
    # Keywords meant for the checkpointed function: the default variant refuses them before anything runs.
    passed_on = $passed_on
    if passed_on:
        error = raised(lambda: torch.utils.checkpoint.checkpoint(block, hidden, **dict.fromkeys(passed_on)))
        if type(error) is ValueError and "Unexpected keyword arguments" in str(error):
            confirmed(f"`{shown}` raises " + describe(error))
        not_reproduced(f"`{shown}`: " + describe(error))


    def parameters_with_gradients(run):
        block.zero_grad(set_to_none=True)
        out = run()
        if out.requires_grad:
            out.sum().backward()
        return sum(parameter.grad is not None for parameter in block.parameters())


    caught, error = warnings_of(lambda: $call)
    said = [message for message in caught if "use_reentrant" in str(message)]
    implicit = parameters_with_gradients(lambda: $call)
    explicit = parameters_with_gradients(lambda: $explicit)
    total = len(list(block.parameters()))
    figures = f"{implicit} of {total} parameters get a gradient from an input without grad (use_reentrant=False: {explicit} of {total})"
    if said and implicit < explicit:
        confirmed(f"`{shown}` warns " + describe(said[0]) + "; " + figures)
    not_reproduced(f"`{shown}`: {describe(said[0]) if said else 'no use_reentrant warning'}; " + figures)
    """,
    call=Code("torch.utils.checkpoint.checkpoint(block, hidden)"),
    explicit=Code("torch.utils.checkpoint.checkpoint(block, hidden, use_reentrant=False)"),
    shown="checkpoint(block, hidden)",
    passed_on=[],
)
def checkpoint_without_use_reentrant(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    name = site.qualified_name(call.func) if call is not None else None
    if name is None or not name.startswith("torch.utils.checkpoint."):
        return entry.canonical("the flagged code is not a checkpoint call", site.device)
    passed_on = keywords_passed_on(call)
    if passed_on:
        keywords = ", ".join(f"{keyword}=None" for keyword in passed_on)
        return entry.witness(
            FROM_FINDING, "a two-layer block and an input stand in for the file's, None for each keyword", site.device,
            passed_on=passed_on, shown=f"{site.code(call.func)}(block, hidden, {keywords})",
        )
    positional = ["block", "hidden"]
    if name.endswith("checkpoint_sequential"):
        segments = semantics.positional(call, 1)
        count = semantics.literal(segments.value) if segments is not None else None
        positional = ["block", str(count) if isinstance(count, int) and count in (1, 2) else "2", "hidden"]
    keywords, dropped = [], []
    for arg in call.args:
        if arg.keyword is None:
            continue
        if semantics.is_missing(semantics.literal(arg.value)):
            dropped.append(arg.keyword.value)
        else:
            keywords.append(f"{arg.keyword.value}={site.code(arg.value)}")
    arguments = ", ".join(positional + keywords)
    note = "a two-layer block and an input without grad stand in for the file's"
    if dropped:
        note += f"; non-literal {', '.join(dropped)} dropped"
    return entry.witness(
        FROM_FINDING, note, site.device,
        call=Code(f"{name}({arguments})"), explicit=Code(f"{name}({arguments}, use_reentrant=False)"),
        shown=f"{site.code(call.func)}({arguments})",
    )


@witness(
    "TL605",
    """
    import torch

    name, public_name = $name, $public
    private, public = resolve(name), resolve(public_name)
    if private is public:
        confirmed(f"`{name}` is `{public_name}` itself (the same object)")
    # A class adding nothing to the public class it derives from, as `_LRScheduler` over `LRScheduler`.
    own = None
    if isinstance(private, type):
        own = set(vars(private)) - {"__module__", "__doc__", "__qualname__", "__firstlineno__", "__static_attributes__"}
    if own == set() and isinstance(public, type) and issubclass(private, public):
        confirmed(f"`{name}` is a subclass of `{public_name}` that defines nothing of its own")
    shared = []
    if type(private) is type(torch):  # a module: compare what it shares with the public one
        shared = [attribute for attribute in dir(public) if not attribute.startswith("_") and hasattr(private, attribute)]
    if shared and all(getattr(private, attribute) is getattr(public, attribute) for attribute in shared):
        confirmed(f"all {len(shared)} names that `{name}` shares with `{public_name}` are the same objects")
    not_reproduced(f"`{name}` and `{public_name}` differ in torch {torch.__version__}")
    """,
    name="torch.optim.lr_scheduler._LRScheduler",
    public="torch.optim.lr_scheduler.LRScheduler",
)
def private_api(site, entry):
    name = _referenced_name(site)
    table_entry = lookup(name) if name is not None else None
    if table_entry is None:
        return entry.canonical("the flagged name could not be resolved", site.device)
    public = table_entry.replacement + name[len(table_entry.name):]
    return entry.canonical(f"`{name}` from the file compared with `{public}`", site.device, name=name, public=public)


_SMALL = "torch.tensor([1e-3, 1e-5, 1e-8], dtype=dtype)"


def _precision_template(accurate: str) -> str:
    return f"""
    import torch
    $imports

    shown, accurate_shown = $shown, $accurate_shown


    def evaluate(dtype):
        $stand_ins
        return $expression, $accurate


    flagged, accurate = evaluate(torch.float32)
    _, reference = evaluate(torch.float64)  # {accurate} in float64
    flagged_error = float(((flagged.double() - reference) / reference).abs().max())
    accurate_error = float(((accurate.double() - reference) / reference).abs().max())
    smallest = int(reference.abs().argmin())
    figures = (
        f"float32, arguments down to 1e-8: `{{shown}}` is off by up to {{flagged_error:.3g}} (relative), "
        f"`{{accurate_shown}}` by {{accurate_error:.3g}}; "
        f"at the smallest, {{float(flagged[smallest]):.6g}} vs {{float(accurate[smallest]):.6g}}"
    )
    if flagged_error > 0.5 and flagged_error > 1000 * accurate_error:
        confirmed(figures)
    not_reproduced(figures)
    """


@witness(
    "TL606",
    _precision_template("torch.log1p"),
    imports=Code(""),
    stand_ins=Code(f"x = {_SMALL}"),
    expression=Code("torch.log(1 + x)"),
    accurate=Code("torch.log1p(x)"),
    shown="torch.log(1 + x)",
    accurate_shown="torch.log1p(x)",
)
def log1p(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    argument = single_argument(call) if call is not None else None
    if not isinstance(argument, cst.BinaryOperation):
        return entry.canonical("the flagged code is not `torch.log(1 + x)`", site.device)
    rest = argument.right if is_one(argument.left) else argument.left
    return _precision_witness(site, entry, call, f"torch.log1p({site.code(rest)})")


@witness(
    "TL607",
    _precision_template("torch.expm1"),
    imports=Code(""),
    stand_ins=Code(f"x = {_SMALL}"),
    expression=Code("torch.exp(x) - 1"),
    accurate=Code("torch.expm1(x)"),
    shown="torch.exp(x) - 1",
    accurate_shown="torch.expm1(x)",
)
def expm1(site, entry):
    node = site.node
    call = node.left if isinstance(node, cst.BinaryOperation) else None
    argument = single_argument(call) if isinstance(call, cst.Call) else None
    if argument is None:
        return entry.canonical("the flagged code is not `torch.exp(x) - 1`", site.device)
    return _precision_witness(site, entry, node, f"torch.expm1({site.code(argument)})")


def _precision_witness(site, entry, node, accurate: str):
    """The flagged formula as written, every free name a float32 tensor of small values (1e-3, 1e-5, 1e-8)."""
    blocked = site.blocked_call(node)
    if blocked is not None:
        return entry.canonical(f"`{blocked}` is not on the allow-list", site.device)
    free = sorted(site.free_names(node))
    stand_ins = "; ".join(f"{name} = {_SMALL}" for name in free) or "pass"
    products = " (products of them smaller still)" if len(free) > 1 else ""
    note = f"{', '.join(free)} = small float32 values{products}" if free else ""
    return entry.witness(
        FROM_FINDING, note, site.device,
        imports=Code(site.torch_imports()), stand_ins=Code(stand_ins), expression=Code(site.code(node)),
        accurate=Code(accurate), shown=site.code(node), accurate_shown=accurate,
    )


@witness(
    "TL608",
    """
    require("torchvision")
    import torchvision

    shown = $shown
    # False, whatever the file passes: True would download weights.
    caught, error = warnings_of(lambda: resolve($builder)(**{$keyword: False}))
    said = [message for message in caught if "deprecated" in str(message)]
    if said:
        confirmed(f"`{shown}` warns " + describe(said[0]))
    not_reproduced(f"`{shown}` gave no deprecation warning ({describe(error)})")
    """,
    builder="torchvision.models.resnet18",
    keyword="pretrained",
    shown="torchvision.models.resnet18(pretrained=False)",
)
def torchvision_pretrained(site, entry):
    call = site.enclosing(site.node, cst.Call)
    name = site.qualified_name(call.func) if call is not None else None
    keyword = site.node.keyword.value if isinstance(site.node, cst.Arg) and site.node.keyword is not None else "pretrained"
    if name is None or not name.startswith("torchvision.models.") or name.endswith(".get_model"):
        return entry.canonical("the builder is not a plain torchvision.models builder", site.device, keyword=keyword,
                               shown=f"torchvision.models.resnet18({keyword}=False)")
    return entry.canonical(f"`{name}` from the file, with {keyword}=False", site.device, builder=name, keyword=keyword,
                           shown=f"{name}({keyword}=False)")


@witness(
    "TL609",
    """
    require("torchvision")
    from torchvision.transforms import v2

    caught, error = warnings_of(lambda: v2.ToTensor())
    said = [message for message in caught if "deprecated" in str(message)]
    if said:
        confirmed("`v2.ToTensor()` warns " + describe(said[0]))
    not_reproduced(f"`v2.ToTensor()` gave no deprecation warning ({describe(error)})")
    """,
)
def torchvision_to_tensor_v2(site, entry):
    return entry.canonical("", site.device)


# ---------------------------------------------------------------- old code on new torch (TL610-TL615)


@witness(
    "TL610",
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    shown = $shown
    loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)
    it = iter(loader)
    error = raised(lambda: it.next())
    batch = next(iter(loader))
    if isinstance(error, AttributeError):
        confirmed(f"`{shown}` on a DataLoader iterator: " + describe(error) + f"; `next(...)` gives the batch {batch[0].tolist()}")
    not_reproduced(f"`{shown}` on a DataLoader iterator: " + describe(error))
    """,
    shown="iter(loader).next()",
)
def dataloader_iterator_next_method(site, entry):
    return entry.canonical("a four-item DataLoader stands in for the file's", site.device, shown=site.code(site.node))


@witness(
    "TL611",
    """
    import torch
    import torch.nn.functional as F

    shown = $shown
    loss = F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, 2, 0]))
    error = raised(lambda: $index)
    if isinstance(error, IndexError) and loss.dim() == 0:
        confirmed(f"`{shown}` on a {loss.dim()}-dim loss: " + describe(error) + f"; `loss.item()` gives {loss.item():.4f}")
    not_reproduced(f"`{shown}` on a {loss.dim()}-dim loss: " + describe(error))
    """,
    index=Code("loss.data[0]"),
    shown="loss.data[0]",
)
def index_zero_dim_tensor(site, entry):
    through_data = isinstance(site.node, cst.Subscript) and isinstance(site.node.value, cst.Attribute) and site.node.value.attr.value == "data"
    index = "loss.data[0]" if through_data else "loss[0]"
    return entry.canonical(f"a cross-entropy loss stands in for `{site.code(site.node)}`", site.device, index=Code(index), shown=index)


@witness(
    "TL612",
    """
    import torch
    from torch.autograd import Variable

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    caught, error = warnings_of(lambda: Variable(x, volatile=True))
    said = [message for message in caught if "volatile" in str(message)]
    output = model(Variable(x, volatile=True))
    with torch.no_grad():
        under_no_grad = model(x)
    figures = (
        f"model(Variable(x, volatile=True)): requires_grad={output.requires_grad}, grad_fn={type(output.grad_fn).__name__}; "
        f"under torch.no_grad(): requires_grad={under_no_grad.requires_grad}"
    )
    if said and output.requires_grad and output.grad_fn is not None and not under_no_grad.requires_grad:
        confirmed("`Variable(x, volatile=True)` warns " + describe(said[0]) + "; " + figures)
    not_reproduced(f"{describe(said[0]) if said else 'no volatile warning'}; " + figures)
    """,
)
def volatile_variable(site, entry):
    return entry.canonical("a small MLP and a random batch stand in for the file's", site.device)


@witness(
    "TL613",
    """
    import torch
    import torch.nn.functional as F

    keyword, legacy, reduction = $keyword, $legacy, $reduction
    logits, labels = torch.randn(6, 4, requires_grad=True), torch.tensor([0, 1, 2, 3, 0, 1])
    if keyword == "retain_variables":
        loss = F.cross_entropy(logits, labels)
        error = raised(lambda: loss.backward(retain_variables=True))
        if isinstance(error, TypeError) and "retain_variables" in str(error):
            confirmed("`loss.backward(retain_variables=True)`: " + describe(error))
        not_reproduced("`loss.backward(retain_variables=True)`: " + describe(error))
    caught, error = warnings_of(lambda: F.cross_entropy(logits, labels, **legacy))
    said = [message for message in caught if "size_average" in str(message)]
    old = F.cross_entropy(logits, labels, **legacy)
    new = F.cross_entropy(logits, labels, reduction=reduction)
    same = old.shape == new.shape and torch.equal(old, new)
    shown = ", ".join(f"{name}={value}" for name, value in legacy.items())
    if said and same:
        confirmed(f"`cross_entropy(..., {shown})` warns " + describe(said[0]) + f"; it computes exactly `reduction={reduction!r}`")
    not_reproduced(f"`cross_entropy(..., {shown})`: {describe(said[0]) if said else 'no warning'}; same as reduction={reduction!r}: {same}")
    """,
    keyword="size_average",
    legacy={"size_average": False},
    reduction="sum",
)
def removed_keyword(site, entry):
    arg = site.node if isinstance(site.node, cst.Arg) and site.node.keyword is not None else None
    if arg is not None and arg.keyword.value == "retain_variables":
        return entry.canonical("a cross-entropy loss stands in for the file's", site.device, keyword="retain_variables")
    call = site.enclosing(site.node, cst.Call)
    legacy = {}
    for other in call.args if call is not None else ():
        if other.keyword is not None and other.keyword.value in LEGACY_KEYWORDS:
            legacy[other.keyword.value] = semantics.literal(other.value)
    if not legacy or not all(value is None or isinstance(value, bool) for value in legacy.values()):
        return entry.canonical("the legacy keywords are not literals: size_average=False stands in", site.device)
    reduction = legacy_reduction(legacy.get("size_average"), legacy.get("reduce"))
    return entry.canonical("the file's legacy keywords, on a cross-entropy loss", site.device, legacy=legacy, reduction=reduction)


@witness(
    "TL614",
    """
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence

    packed = pack_padded_sequence(torch.randn(5, 2, 4), [5, 3])


    def unpack():
        $targets = packed


    error = raised(unpack)
    if isinstance(error, ValueError):
        confirmed(f"`{$shown}` on a PackedSequence with fields {list(packed._fields)}: " + describe(error))
    not_reproduced(f"`{$shown}`: " + describe(error))
    """,
    targets=Code("data, batch_sizes"),
    shown="data, batch_sizes = pack_padded_sequence(...)",
)
def packed_sequence_unpacked(site, entry):
    statement = site.node if isinstance(site.node, cst.Assign) else None
    target = statement.targets[0].target if statement is not None else None
    if not isinstance(target, (cst.Tuple, cst.List)):
        return entry.canonical("the flagged code is not an unpacking", site.device)
    names = ", ".join(f"value_{index}" for index in range(len(target.elements)))
    targets = names + ("," if len(target.elements) == 1 else "")
    return entry.canonical(
        f"the file's {len(target.elements)} targets, on a packed batch of two sequences", site.device,
        targets=Code(targets), shown=f"{targets} = pack_padded_sequence(...)",
    )


@witness(
    "TL615",
    """
    import torch

    name = $name
    function = resolve(name)
    call = (lambda x: function()(x)) if name.rpartition(".")[2][:1].isupper() else function
    x = torch.randn(2, 3, 5)  # (batch, time, vocabulary)
    caught, error = warnings_of(lambda: call(x))
    said = [message for message in caught if "Implicit dimension" in str(message)]
    output = call(x)
    weights = output.exp() if "Log" in name or "log_" in name else output
    over_batch = bool(torch.allclose(weights.sum(0), torch.ones(3, 5)))
    over_last = bool(torch.allclose(weights.sum(-1), torch.ones(2, 3)))
    figures = f"on a (2, 3, 5) tensor the weights sum to 1 over dim 0 (the batch): {over_batch}; over the last dim: {over_last}"
    if said and over_batch and not over_last:
        confirmed(f"`{name}` without dim warns " + describe(said[0]) + "; " + figures)
    not_reproduced(f"`{name}` without dim: {describe(said[0]) if said else 'no warning'}; " + figures)
    """,
    name="torch.nn.functional.softmax",
)
def softmax_implicit_dim(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    name = site.qualified_name(call.func) if call is not None else None
    if name is None:
        return entry.canonical("the softmax variant could not be resolved", site.device)
    return entry.canonical(f"`{name}` from the file, on a stand-in 3-D tensor", site.device, name=name)


# torch.cuda's old peak-memory resets, `observed` entries of the table: torch warns that they now call
# `reset_peak_memory_stats`, without the word "deprecated". Confirmed by that warning and by their body.
PROBES.update({"torch.cuda.reset_max_memory_allocated": "()", "torch.cuda.reset_max_memory_cached": "()"})
_CALLS_RESET_PEAK_MEMORY_STATS = """
import inspect
if said or sentence:
    not_reproduced(f"`{shown}` now says it is deprecated: " + (describe(said[0]) if said else f'its docstring says "{sentence[:200]}"'))
now_calls = [message for message in caught if "now calls torch.cuda.reset_peak_memory_stats" in str(message)]
delegates = "return reset_peak_memory_stats(" in inspect.getsource(target)
evidence = (f"`{shown}` warns " + (describe(now_calls[0]) if now_calls else "nothing about reset_peak_memory_stats")
            + f"; its body returns `reset_peak_memory_stats(device)`: {delegates}")
if now_calls and delegates:
    confirmed(evidence)
not_reproduced(evidence)
"""
SILENT_BEHAVIOUR.update({
    "torch.cuda.reset_max_memory_allocated": _CALLS_RESET_PEAK_MEMORY_STATS,
    "torch.cuda.reset_max_memory_cached": _CALLS_RESET_PEAK_MEMORY_STATS,
})
