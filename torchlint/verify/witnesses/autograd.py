"""Autograd witnesses (TL1xx): graphs, leaves and gradients, all exact on CPU."""

from __future__ import annotations

import libcst as cst

from torchlint import semantics
from torchlint.verify.site import is_device_name
from torchlint.verify.witness import FROM_FINDING, Code, witness

# Grad-disabling regions as the finding's file wrote them, canonical form first.
_REGIONS = {
    "torch.no_grad": "torch.no_grad()",
    "torch.autograd.no_grad": "torch.no_grad()",
    "torch.inference_mode": "torch.inference_mode()",
    "torch.autograd.inference_mode": "torch.inference_mode()",
    "torch.set_grad_enabled": "torch.set_grad_enabled(False)",
    "torch.autograd.set_grad_enabled": "torch.set_grad_enabled(False)",
}


@witness(
    "TL101",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.randn(4, 3)
    with $region:
        out = model(x)
    loss = out.sum()
    error = raised(loss.backward)
    if isinstance(error, RuntimeError) and "does not require grad" in str(error):
        confirmed(describe(error) + " (raised at loss.backward(), forward under $region)")
    not_reproduced("loss.backward() after a forward under $region: " + describe(error))
    """,
    region=Code("torch.no_grad()"),
)
def backward_under_no_grad(site, entry):
    # The region the file disables grad with decides the witness's region.
    function = site.enclosing(site.node, cst.FunctionDef) or site.ctx.module
    regions = set()
    for node in _walk(function):
        items = [item.item for item in node.items] if isinstance(node, cst.With) else []
        if isinstance(node, cst.FunctionDef):
            items = [decorator.decorator for decorator in node.decorators]
        for item in items:
            if semantics.grad_mode_of(item, site.ctx, site.stack(item)) is False:
                target = item.func if isinstance(item, cst.Call) else item
                regions.add(_REGIONS.get(site.qualified_name(target), "torch.no_grad()"))
    if len(regions) == 1:
        return entry.canonical("grad-disabling region taken from the file", site.device, region=Code(regions.pop()))
    return entry.canonical("the region is the canonical torch.no_grad()", site.device)


@witness(
    "TL102",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    # lr=0 keeps the weights fixed, so every backward adds the same gradient.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    grads = []
    for step in range($steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        grads.append(model.weight.grad.clone())
    ratios = [round(float(g.norm() / grads[0].norm()), 4) for g in grads]
    if torch.allclose(grads[-1], $steps * grads[0]):
        confirmed(f"without zero_grad, grad / first step's grad = {ratios} after {len(grads)} steps (grad == {len(grads)} x g1)")
    not_reproduced(f"grad / first step's grad = {ratios}")
    """,
    steps=3,
)
def step_without_zero_grad(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL103",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)


    def graph_nodes(roots):
        seen, pending = set(), [t.grad_fn for t in roots if t.grad_fn is not None]
        while pending:
            node = pending.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            pending.extend(next_node for next_node, _ in node.next_functions)
        return len(seen)


    total, kept, counts = 0, [], []
    for step in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if $form == "append":
            kept.append(loss)
            counts.append(graph_nodes(kept))
        else:
            total += loss
            counts.append(graph_nodes([total]))
    growth = [after - before for before, after in zip(counts, counts[1:])]
    if growth and all(step > 0 for step in growth):
        confirmed(f"grad_fn nodes reachable from the accumulated losses per iteration: {counts} (+{growth[0]} per iteration)")
    not_reproduced(f"grad_fn nodes per iteration: {counts}")
    """,
    form="add",
)
def loss_accumulated_with_graph(site, entry):
    statement = site.enclosing(site.node, cst.SimpleStatementLine)
    text = site.code(statement) if statement is not None else site.code(site.node)
    form = "append" if ".append(" in text else "add"
    return entry.canonical(f"accumulation form `{form}` taken from the file", site.device, form=form)


@witness(
    "TL104",
    """
    import torch
    import warnings

    warnings.simplefilter("ignore")  # reading .grad of a non-leaf warns; the value is the evidence
    shown, substituted = $shown, $substituted
    $stand_ins
    w = $expression
    (w * 2).sum().backward()
    if not w.is_leaf and w.grad is None:
        confirmed(f"`{shown}`: w.is_leaf=False, w.grad=None after backward{substituted}")
    grad = "set" if w.grad is not None else None
    not_reproduced(f"`{shown}`: w.is_leaf={w.is_leaf}, w.grad={grad}: the conversion returned the leaf itself{substituted}")
    """,
    expression=Code("torch.randn(3, requires_grad=True).double()"),
    shown="torch.randn(3, requires_grad=True).double()",
    substituted="",
    stand_ins=Code("pass"),
)
def non_leaf_requires_grad(site, entry):
    node = _outermost_conversion(site, site.node)
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return _tl104_canonical(site, entry, "the flagged code is not a conversion call")
    blocked = site.blocked_call(node)
    if blocked is not None:
        return _tl104_canonical(site, entry, f"the flagged code calls `{blocked}`, which is not on the allow-list")
    free = site.free_names(node)
    devices = {name for name in free if is_device_name(name)}
    if free - devices:
        return _tl104_canonical(site, entry, f"the flagged code uses {', '.join(sorted(free - devices))}, defined elsewhere in the file")
    shown = site.code(node)
    expression, substituted, runs = shown, "", node
    stand_ins = "; ".join(f'{name} = torch.device("cuda")' for name in sorted(devices)) or "pass"
    if site.device != "cuda" and _is_device_move(node):
        # A real move is a differentiable copy; on a CPU-only machine `.clone()` stands in for it.
        runs = node.func.value
        expression = site.code(runs) + ".clone()"
        substituted = " (the move ran as `.clone()`, a differentiable copy, on this CPU-only machine)"
    if site.device != "cuda" and _places_on_cuda(runs):
        return "needs a GPU: the tensor is created on cuda"
    return entry.witness(
        FROM_FINDING, "", site.device, preamble=site.torch_imports(),
        expression=Code(expression), shown=shown, substituted=substituted, stand_ins=Code(stand_ins),
    )


_CONVERSIONS = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "type"})


def _outermost_conversion(site, node: cst.CSTNode) -> cst.CSTNode:
    """`f(...).float().to(d)` for the reported `f(...).float()`: the variable holds the whole chain's result."""
    while True:
        parents = site.ancestors(node)
        if len(parents) < 2 or not isinstance(parents[0], cst.Attribute) or not isinstance(parents[1], cst.Call):
            return node
        if parents[0].value is not node or parents[0].attr.value not in _CONVERSIONS:
            return node
        node = parents[1]


def _tl104_canonical(site, entry, why):
    return entry.canonical(why, site.device)


def _is_device_move(call: cst.Call) -> bool:
    method = call.func.attr.value
    if method == "cuda":
        return True
    if method != "to":
        return False
    for arg in call.args:
        value = semantics.literal(arg.value)
        if isinstance(value, str) and value.startswith("cuda"):
            return True
        if arg.keyword is None and isinstance(arg.value, (cst.Name, cst.Attribute)) and is_device_name(semantics.terminal_name(arg.value)):
            return True
    return False


def _places_on_cuda(node: cst.CSTNode) -> bool:
    """A `"cuda..."` literal or a `.cuda()` call in `node`: code that cannot run without a GPU."""
    for child in _walk(node):
        value = semantics.literal(child) if isinstance(child, cst.SimpleString) else None
        if isinstance(value, str) and value.startswith("cuda"):
            return True
        if isinstance(child, cst.Call) and isinstance(child.func, cst.Attribute) and child.func.attr.value == "cuda":
            return True
    return False


def _walk(root: cst.CSTNode):
    pending = [root]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(node.children)


@witness(
    "TL105",
    """
    import torch


    def collate_guarded(batch):
        with torch.no_grad():
            return torch.stack(batch)


    def collate_plain(batch):
        return torch.stack(batch)


    torch.manual_seed(0)
    batch = [torch.randn(3) for _ in range(4)]
    loader = torch.utils.data.DataLoader(batch, batch_size=4, collate_fn=collate_guarded)
    guarded, plain = next(iter(loader)), collate_plain(batch)
    if torch.equal(guarded, plain) and not guarded.requires_grad and not plain.requires_grad:
        confirmed("the collated batch is identical with and without no_grad, requires_grad=False either way: no_grad has nothing to disable")
    not_reproduced(f"equal={torch.equal(guarded, plain)} requires_grad={guarded.requires_grad}/{plain.requires_grad}")
    """,
)
def no_grad_in_data_pipeline(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL106",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model.eval()
    parameters = {p.data_ptr() for p in model.parameters()}


    def saved_activation_bytes(batches, grad_enabled):
        saved = []

        def pack(tensor):
            if tensor.data_ptr() not in parameters:
                saved.append(tensor.numel() * tensor.element_size())
            return tensor

        with torch.set_grad_enabled(grad_enabled), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            outputs = [model(torch.randn(32, 64)) for _ in range(batches)]
        return sum(saved), outputs[-1].grad_fn is not None


    held, has_graph = saved_activation_bytes($batches, True)
    held_no_grad, _ = saved_activation_bytes($batches, False)
    if held > 0 and has_graph and held_no_grad == 0:
        confirmed(f"{$batches} eval batches in eval mode kept {held} bytes of activations for backward while their outputs live (grad_fn set); under torch.no_grad(): {held_no_grad} bytes")
    not_reproduced(f"activations kept: {held} bytes with grad, {held_no_grad} bytes under no_grad")
    """,
    batches=5,
)
def eval_without_no_grad(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL107",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    modes, dropout_active = [], []
    for epoch in range(2):
        modes.append(model.training)
        dropout_active.append(not torch.equal(model(x), model(x)))
        loss = model(x).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.eval()  # validation, with no model.train() before the next epoch
    if modes == [True, False]:
        confirmed(f"model.training during training, epoch 1: {modes[0]}, epoch 2: {modes[1]}; dropout active: {dropout_active}")
    not_reproduced(f"model.training per epoch: {modes}")
    """,
)
def train_mode_not_restored(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL109",
    """
    import torch
    import warnings

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    used = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            optimizer.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            scheduler.step()
            used.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
    messages = [str(w.message) for w in caught if "before `optimizer.step()`" in str(w.message)]
    if messages and used[0] != 1.0:
        confirmed(f"UserWarning: {messages[0].split('. In PyTorch')[0]}; the first optimizer.step() used lr={used[0]:g}, not the schedule's first value 1")
    not_reproduced(f"warnings: {messages}; learning rates used: {used}")
    """,
)
def scheduler_before_optimizer_step(site, entry):
    return entry.canonical("", site.device)
