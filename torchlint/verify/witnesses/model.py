"""Model-definition witnesses (TL7xx): what a Module does with layers, methods and tensors it does not expect.

Each witness defines a small Module shaped like the flagged code and asks torch what it
registered, converted, moved or called.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.rules.model.module_api_shadowed import typo_of
from torchlint.verify.witness import FROM_FINDING, Code, witness

_DROPOUT_FUNCTIONS = {
    f"torch.nn.functional.{name}": name
    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
}
# How each shadowed method is reached when the model is used as a Module, and a method of that name that records
# its arguments.
_MODULE_CALLS = {
    "train": "model.eval()",
    "eval": "model.eval()",
    "parameters": "torch.optim.SGD(model.parameters(), lr=0.1)",
    "named_parameters": "list(model.parameters())",
    "state_dict": "model.state_dict()",
    "to": "model.to('cpu')",
    "cuda": "model.cuda()",
    "zero_grad": "model.zero_grad()",
    "modules": "list(model.modules())",
    "children": "model.eval()",
    "apply": "torch.nn.Sequential(model).apply(lambda module: None)",
}


@witness(
    "TL701",
    """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    shown = $shown


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = $container
            self.out = nn.Linear(4, 1)

        def forward(self, x):
            for layer in held(self.layers):
                x = layer(x)
            return self.out(x)


    def held(container):
        return list(container.values()) if isinstance(container, dict) else list(container)


    model = Model()
    first = held(model.layers)[0]
    registered = {id(parameter) for parameter in model.parameters()}
    missed = sum(id(parameter) not in registered for layer in held(model.layers) for parameter in layer.parameters())
    saved = list(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = first.weight.detach().clone()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
    unchanged = torch.equal(before, first.weight) and first.weight.grad is not None
    model.double()
    model.eval()
    figures = (
        f"`self.layers = {shown}`: parameters() holds {len(registered)} tensors and misses {missed} of the layers'; "
        f"state_dict keys {saved}; after SGD.step() the first layer's weight is unchanged although its .grad is "
        f"filled: {unchanged}; after model.double() it is {first.weight.dtype}; after model.eval() its training is "
        f"{first.training}"
    )
    if missed and unchanged and first.weight.dtype == torch.float32 and first.training:
        confirmed(figures)
    not_reproduced(figures)
    """,
    container=Code("[nn.Linear(4, 4), nn.Linear(4, 4)]"),
    shown="[nn.Linear(4, 4), nn.Linear(4, 4)]",
)
def unregistered_submodules(site, entry):
    statement = site.enclosing(site.node, cst.Assign)
    if statement is not None and type(statement.value) in (cst.Dict, cst.DictComp):
        container = '{"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)}'
        return entry.canonical("the file's container is a dict: a dict of two layers", site.device, container=Code(container), shown=container)
    return entry.canonical("the file's layers replaced by two Linear layers", site.device)


@witness(
    "TL702",
    """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    kind = $kind
    shown = $shown


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 4)

        def forward(self, x):
            return $built(self.fc1(x))


    model = Model().eval()
    x = torch.randn(16, 4)
    names = [name for name, _ in model.named_parameters()]
    with torch.no_grad():
        first, second = model(x), model(x)
        hidden = model.fc1(x)
    if kind == "norm":
        spread = float(first.mean(0).abs().max())
        figures = (
            f"`{shown}` in forward, model in eval(): registered parameters {names}; the output is normalised with the "
            f"batch's own statistics (largest per-feature mean {spread:.2e}) instead of running statistics"
        )
        if names == ["fc1.weight", "fc1.bias"] and spread < 1e-5 and not torch.allclose(first, hidden):
            confirmed(figures)
        not_reproduced(figures)
    differ = not torch.equal(first, second)
    figures = f"`{shown}` in forward: registered parameters {names}; two forwards in eval() differ: {differ}"
    if kind == "parameter":
        if names == ["fc1.weight", "fc1.bias"]:
            confirmed(f"`{shown}` in forward: registered parameters {names}: the parameter made in forward is not among them")
        not_reproduced(figures)
    if names == ["fc1.weight", "fc1.bias"] and differ:
        confirmed(figures)
    not_reproduced(figures)
    """,
    built=Code("nn.Linear(4, 4)"),
    shown="nn.Linear(4, 4)",
    kind="layer",
)
def layer_built_in_forward(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    name = site.qualified_name(call.func) if call is not None else None
    if name is None:
        return entry.canonical("the flagged layer is not a torch class; a Linear stands in", site.device)
    short = name.rpartition(".")[2]
    if short == "Parameter":
        built = "(lambda h: h * nn.Parameter(torch.ones(4)))"
        return entry.canonical("the file's parameter stands in as nn.Parameter(torch.ones(4))", site.device, built=Code(built), shown="nn.Parameter(torch.ones(4))", kind="parameter")
    if "Dropout" in short:
        built = f"nn.{short}(0.5)" if short in ("Dropout", "AlphaDropout") else "nn.Dropout(0.5)"
        return entry.canonical(f"`{short}` from the file, with p=0.5", site.device, built=Code(built), shown=built)
    if "Norm" in short:
        return entry.canonical(f"`{short}` from the file; a BatchNorm1d(4) stands in", site.device, built=Code("nn.BatchNorm1d(4)"), shown="nn.BatchNorm1d(4)", kind="norm")
    return entry.canonical(f"`{short}` from the file; a Linear(4, 4) stands in", site.device)


@witness(
    "TL703",
    """
    import torch
    import torch.nn as nn

    calls = []
    shape = $shape
    shown = $shown


    class Model(nn.Module):
        def $init_name(self):
            $init_body
            self.drop = nn.Dropout(0.5)

        def $forward_name(self, x):
            return self.drop(x)

        $method


    if shape == "signature":
        model = Model()
        error = raised(lambda: $call)
        if isinstance(error, TypeError):
            confirmed(f"`{shown}` on a Module: `$call` raises " + describe(error))
        if calls and calls[0] is False and model.training and model.drop.training:
            confirmed(f"`{shown}`: `$call` calls it with False as its first argument; model.training stays {model.training}, the Dropout's training stays {model.drop.training}")
        not_reproduced(f"`{shown}`: `$call` gave {describe(error)}; calls {calls!r}, model.training {model.training}")
    if shape == "forward":
        error = raised(lambda: Model()(torch.ones(2)))
        if isinstance(error, NotImplementedError):
            confirmed("`$forward_name` instead of forward: the first call raises " + describe(error))
        not_reproduced("`$forward_name` instead of forward: the call gave " + describe(error))
    if shape == "init":
        model = Model()
        count = len(list(model.parameters())) + len(list(model.children()))
        error = raised(lambda: model(torch.ones(2)))
        if count == 0 and isinstance(error, AttributeError):
            confirmed(f"`$init_name` instead of __init__: the model builds with no submodule or parameter; the first forward raises " + describe(error))
        not_reproduced(f"`$init_name` instead of __init__: {count} submodules and parameters; forward gave " + describe(error))
    error = raised(Model)
    if isinstance(error, AttributeError) and "before Module.__init__() call" in str(error):
        confirmed("an __init__ without super().__init__(): construction raises " + describe(error))
    not_reproduced("an __init__ without super().__init__(): construction gave " + describe(error))
    """,
    shape="signature",
    init_name=Code("__init__"),
    init_body=Code("super().__init__()"),
    forward_name=Code("forward"),
    method=Code("def train(self, loader=None, epochs=1):\n        calls.append(loader)"),
    call=Code("model.eval()"),
    shown="def train(self, loader=None, epochs=1)",
)
def module_api_shadowed(site, entry):
    function = site.enclosing(site.node, cst.FunctionDef)
    if function is None:
        return entry.canonical("the flagged method could not be read", site.device)
    name = function.name.value
    if name == "__init__":
        return entry.canonical("an __init__ that assigns a layer without super().__init__()", site.device, shape="super",
                               init_body=Code("pass"), method=Code("pass"))
    if name not in _MODULE_CALLS:
        if typo_of(name) == "__init__":
            return entry.canonical(f"`{name}` from the file", site.device, shape="init", init_name=Code(name), method=Code("pass"))
        return entry.canonical(f"`{name}` from the file, in a class without forward", site.device, shape="forward",
                               forward_name=Code(name), method=Code("pass"))
    if any(param.default is not None and semantics.is_missing(semantics.literal(param.default)) for param in (*function.params.params, *function.params.kwonly_params)):
        return entry.canonical("the file's signature has non-literal defaults; the canonical train(self, loader=None, epochs=1) is used", site.device)
    signature = _plain_signature(site, function)
    first = _first_argument(function)
    record = f"calls.append({first})" if first else "calls.append(None)"
    returns = "\n        return iter(())" if name in ("parameters", "named_parameters", "modules", "children") else ""
    method = Code(f"def {name}({signature}):\n        {record}{returns}")
    return entry.witness(FROM_FINDING, "the file's signature", site.device, shape="signature", method=method,
                         call=Code(_MODULE_CALLS[name]), shown=f"def {name}({signature})")


def _plain_signature(site, function: cst.FunctionDef) -> str:
    """The parameters without annotations (they may name what the witness does not define)."""
    params = function.params
    parts = [param.name.value + (f"={site.code(param.default)}" if param.default is not None else "") for param in (*params.posonly_params, *params.params)]
    if isinstance(params.star_arg, cst.Param):
        parts.append("*" + params.star_arg.name.value)
    elif params.kwonly_params:
        parts.append("*")
    parts += [param.name.value + (f"={site.code(param.default)}" if param.default is not None else "") for param in params.kwonly_params]
    if params.star_kwarg is not None:
        parts.append("**" + params.star_kwarg.name.value)
    return ", ".join(parts)


def _first_argument(function: cst.FunctionDef) -> Optional[str]:
    params = list(function.params.posonly_params) + list(function.params.params)
    return params[1].name.value if len(params) > 1 else None


@witness(
    "TL704",
    """
    import torch
    import torch.nn as nn

    stale = garbage = 0
    for _ in range(200):
        previous = torch.full((64, 64), 7.0)
        del previous
        weight = nn.Parameter($factory)
        stale += bool((weight == 7.0).any())
        garbage += bool(not torch.isfinite(weight).all() or weight.abs().max() > 1e6 or (weight == 7.0).any())
    figures = f"`nn.Parameter($factory)` right after freeing a 7.0-filled tensor: stale 7.0 values in {stale} of 200, not a fresh initialisation (stale, inf/NaN or huge values) in {garbage} of 200"
    if garbage:
        confirmed(figures)
    not_reproduced(figures)
    """,
    factory=Code("torch.Tensor(64, 64)"),
)
def uninitialized_parameter(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    name = site.qualified_name(call.func) if call is not None else None
    if name in ("torch.empty", "torch.FloatTensor"):
        return entry.canonical(f"`{name}` from the file, with sizes (64, 64)", site.device, factory=Code(f"{name}(64, 64)"))
    return entry.canonical("the file's sizes replaced by (64, 64)", site.device)


@witness(
    "TL705",
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)


    class Model(nn.Module):
        def forward(self, x):
            return F.$function(x, $p)


    model = Model().eval()
    x = torch.ones($shape)
    out = model(x)
    zeroed = float((out == 0).float().mean())
    figures = f"`F.$function(x, $p)` in forward, model in eval(): {zeroed:.1%} of the outputs zeroed, largest {float(out.max()):.2f}"
    if zeroed > 0 or not torch.equal(out, x):
        confirmed(figures)
    not_reproduced(figures)
    """,
    function=Code("dropout"),
    p=0.5,
    shape=Code("100000"),
)
def dropout_always_on(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    name = site.qualified_name(call.func) if call is not None else None
    function = _DROPOUT_FUNCTIONS.get(name)
    if function is None:
        return entry.canonical("the flagged call is not a functional dropout", site.device)
    given = semantics.positional(call, 1) or semantics.keyword(call, "p")
    p = semantics.literal(given.value) if given is not None else 0.5
    if not isinstance(p, float) or not 0 < p < 1:
        return entry.canonical(f"`F.{function}` from the file, with p=0.5", site.device, function=Code(function),
                               shape=Code(_shape(function)))
    return entry.witness(FROM_FINDING, "", site.device, function=Code(function), p=p, shape=Code(_shape(function)))


def _shape(function: str) -> str:
    # dropout1d/2d/3d drop whole channels: give them channels.
    return {"dropout1d": "1000, 100, 4", "dropout2d": "1000, 100, 2, 2", "dropout3d": "1000, 100, 2, 2, 2",
            "feature_alpha_dropout": "1000, 100, 2, 2"}.get(function, "100000")


@witness(
    "TL706",
    """
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    if $value:
        model.requires_grad_(False)  # frozen first, to see whether `= True` unfreezes anything
    model.requires_grad = $value
    trainable = sum(parameter.requires_grad for parameter in model.parameters())
    figures = f"`model.requires_grad = $value` on a module: {trainable} of 4 parameters require grad afterwards"
    if trainable == (0 if $value else 4):
        confirmed(figures + " (nothing changed: it only set a Python attribute)")
    not_reproduced(figures)
    """,
    value=False,
)
def module_requires_grad_attribute(site, entry):
    statement = site.enclosing(site.node, cst.Assign)
    value = semantics.literal(statement.value) if statement is not None else None
    if not isinstance(value, bool):
        return entry.canonical("the assigned value is not a literal True or False; False stands in", site.device)
    return entry.canonical(f"the assigned value {value} from the file, on a stand-in model", site.device, value=value)


@witness(
    "TL707",
    """
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.mask = $tensor
            self.register_buffer("buffer", torch.ones(3))

        def forward(self, x):
            return self.fc(x) * self.mask


    model = Model().double()
    keys = list(model.state_dict())
    meta = Model().to("meta")
    figures = (
        f"`self.mask = $tensor`: after model.double() fc is {model.fc.weight.dtype}, the buffer {model.buffer.dtype}, "
        f"mask {model.mask.dtype}; state_dict keys {keys}; after .to('meta') the buffer is on {meta.buffer.device.type}, "
        f"mask on {meta.mask.device.type}"
    )
    if "mask" not in keys and meta.mask.device.type == "cpu" and meta.buffer.device.type == "meta":
        confirmed(figures)
    not_reproduced(figures)
    """,
    tensor=Code("torch.ones(3)"),
)
def tensor_attribute_not_buffer(site, entry):
    return entry.canonical("the file's tensor replaced by torch.ones(3)", site.device)
