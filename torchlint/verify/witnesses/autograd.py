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


@witness(
    "TL110",
    """
    import torch


    def train(order):
        # 5 SGD steps, each iteration running the calls in `order`: Z zero_grad, B backward, S step, C clip.
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(8, 3), torch.randn(8, 1)
        start = [p.detach().clone() for p in model.parameters()]
        for step in range(5):
            for call in order:
                if call == "Z":
                    optimizer.zero_grad()
                elif call == "B":
                    torch.nn.functional.mse_loss(model(x), y).backward()
                elif call == "S":
                    optimizer.step()
                else:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-6)
        weights = [p.detach().clone() for p in model.parameters()]
        return sum(float((w - s).norm()) for w, s in zip(weights, start)), weights


    order = $order
    moved, weights = train(order)
    usual, _ = train("ZBS")
    if "C" in order:
        _, unclipped = train(order.replace("C", ""))
        clipped_before_step, _ = train("ZBCS")
        if all(torch.equal(a, b) for a, b in zip(weights, unclipped)):
            confirmed(f"order {order} (5 SGD steps, clip to 1e-6 after the step): weights identical to the run without clipping (moved {moved:.3f}); clipped between backward and step they move {clipped_before_step:.2g}")
        not_reproduced(f"order {order}: weights differ from the unclipped run (moved {moved:.3f})")
    if moved == 0.0 and usual > 0:
        confirmed(f"order {order} (5 SGD steps): the weights moved by exactly {moved}; in the order ZBS (zero_grad, backward, step) they moved by {usual:.3f}")
    not_reproduced(f"order {order}: the weights moved by {moved:.3f} (ZBS: {usual:.3f})")
    """,
    order="BZS",
)
def update_cancelled_by_order(site, entry):
    # The finding's shape: a clip after the step, the clearing between backward and step, or clear-step-backward.
    if isinstance(site.node, cst.Call) and semantics.method_name(site.node) != "zero_grad":
        return entry.canonical("shape taken from the finding: a clip after the step", site.device, order="ZBSC")
    if "then runs `backward()`" in site.finding.message:
        return entry.canonical("shape taken from the finding: zero_grad, step, backward", site.device, order="ZSB")
    return entry.canonical("shape taken from the finding: zero_grad between backward and step", site.device)


@witness(
    "TL111",
    """
    import torch

    def train(unscale):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
        x, y = torch.randn(32, 16), torch.randn(32, 1)
        before = model.weight.detach().clone()
        optimizer.zero_grad()
        scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
        if unscale:
            scaler.unscale_(optimizer)
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        scaler.step(optimizer)
        scaler.update()
        return norm, float((model.weight.detach() - before).norm())


    scaled_norm, scaled_update = train(unscale=False)
    norm, update = train(unscale=True)
    if scaled_norm > 1000 * norm and update > 1000 * scaled_update:
        confirmed(f"GradScaler(init_scale=2**16), clip_grad_norm_(..., 1.0): without unscale_ the clip sees a norm of {scaled_norm:,.1f} and the update has norm {scaled_update:.3g}; with unscale_ it sees {norm:.3f} and the update is {update:.3g} ({update / scaled_update:,.0f}x larger)")
    not_reproduced(f"clip norm {scaled_norm:.3g} without unscale_ vs {norm:.3g} with; updates {scaled_update:.3g} vs {update:.3g}")
    """,
)
def clip_before_unscale(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL112",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    first = torch.optim.$optimizer(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(first, step_size=1, gamma=0.1)
    optimizer = first
    for epoch in range(3):
        optimizer = torch.optim.$optimizer(model.parameters(), lr=0.01)  # rebuilt in the loop
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        state_before_next = sum(len(state) for state in optimizer.state.values())
        scheduler.step()
    rebuilt = torch.optim.$optimizer(model.parameters(), lr=0.01)
    state_after_rebuild = sum(len(state) for state in rebuilt.state.values())
    lr_used, lr_scheduled = optimizer.param_groups[0]["lr"], first.param_groups[0]["lr"]
    if state_before_next > 0 and state_after_rebuild == 0 and lr_used != lr_scheduled:
        confirmed(f"$optimizer rebuilt every epoch: after a step it held {state_before_next} state tensors, a rebuilt one holds {state_after_rebuild}; the scheduler stepped the first optimizer (lr {lr_scheduled:g}) while the optimizer in use stays at lr {lr_used:g}")
    not_reproduced(f"state after a step {state_before_next}, after rebuilding {state_after_rebuild}; lr in use {lr_used:g}, scheduled {lr_scheduled:g}")
    """,
    optimizer=Code("Adam"),
)
def optimizer_rebuilt_in_loop(site, entry):
    name = site.qualified_name(site.node.func) if isinstance(site.node, cst.Call) else None
    last = (name or "").rpartition(".")[2]
    if name and name.startswith("torch.optim.") and last in _STATEFUL_OPTIMIZERS:
        return entry.canonical(f"optimizer class `{last}` taken from the finding", site.device, optimizer=Code(last))
    return entry.canonical("the optimizer is the canonical Adam", site.device)


# torch.optim classes that keep per-parameter state after one step with their defaults (SGD only with momentum).
_STATEFUL_OPTIMIZERS = frozenset({"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop", "ASGD", "Rprop"})


@witness(
    "TL113",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    loss = torch.nn.$criterion()
    batches = [(torch.randn(2, 4), torch.randint(0, 3, (2,)) if "$criterion" in ("CrossEntropyLoss", "NLLLoss") else torch.randn(2, 3)) for _ in range(2)]
    errors = []
    for iteration, (x, y) in enumerate(batches):
        def run():
            global loss
            loss = loss(model(x), y)
        errors.append(raised(run))
    if errors[0] is None and isinstance(errors[1], TypeError):
        confirmed(f"`loss = loss(out, y)` with loss = nn.$criterion(): iteration 0 runs; iteration 1 raises " + describe(errors[1]))
    not_reproduced(f"iteration 0: {describe(errors[0]) if errors[0] else 'ran'}; iteration 1: {describe(errors[1]) if errors[1] else 'ran'}")
    """,
    criterion=Code("CrossEntropyLoss"),
)
def criterion_overwritten(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL114",
    """
    import io
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    shape = $shape
    if shape == "eval":
        model.eval
        if model.training:
            confirmed("after a bare `model.eval` statement model.training is still True (dropout stays on)")
        not_reproduced("model.training is False after a bare `model.eval`")
    if shape == "zero_grad":
        model(torch.randn(2, 4)).sum().backward()
        optimizer.zero_grad
        if model[0].weight.grad is not None:
            confirmed("after a bare `optimizer.zero_grad` statement the gradients are kept (weight.grad is still set)")
        not_reproduced("the gradients were cleared")
    if shape in ("train", "step", "backward"):
        model.eval()
        model(torch.randn(2, 4)).sum().backward()
        before = (model.training, model[0].weight.detach().clone(), model[0].weight.grad.clone())
        loss = model(torch.randn(2, 4)).sum()
        {"train": lambda: model.train, "step": lambda: optimizer.step, "backward": lambda: loss.backward}[shape]()
        after = (model.training, model[0].weight.detach(), model[0].weight.grad)
        if before[0] == after[0] and torch.equal(before[1], after[1]) and torch.equal(before[2], after[2]):
            confirmed(f"naming `{shape}` without calling it changes nothing: model.training={after[0]}, weights and gradients unchanged")
        not_reproduced(f"`{shape}` without a call changed the model")
    if shape == "state_dict":
        buffer = io.BytesIO()
        torch.save(model.state_dict, buffer)
        size = buffer.tell()
        buffer.seek(0)
        refused = raised(lambda: torch.load(buffer))
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        wrong = raised(lambda: model.load_state_dict(loaded))
        if refused is not None and isinstance(wrong, TypeError):
            confirmed(f"`torch.save(model.state_dict, f)` wrote {size} bytes (the bound method, with its module); torch.load(f): " + describe(refused).split(". ")[0] + "; with weights_only=False, load_state_dict(loaded): " + describe(wrong))
        not_reproduced(f"loading: {describe(refused) if refused else 'worked'}; load_state_dict: {describe(wrong) if wrong else 'worked'}")
    error = raised(lambda: torch.optim.SGD(model.parameters, lr=0.1))
    if isinstance(error, TypeError):
        confirmed("`torch.optim.SGD(model.parameters, lr=0.1)`: " + describe(error))
    not_reproduced("an optimizer was built on the bound method: " + (describe(error) if error else "no error"))
    """,
    shape="eval",
)
def method_not_called(site, entry):
    node = site.node
    method = node.attr.value if isinstance(node, cst.Attribute) else ""
    if method in ("parameters", "named_parameters"):
        return entry.canonical("shape taken from the finding: an optimizer built on the method", site.device, shape="parameters")
    if method in ("eval", "train", "zero_grad", "step", "backward", "state_dict"):
        return entry.canonical(f"shape taken from the finding: `{method}` not called", site.device, shape=method)
    return entry.canonical("the canonical bare `model.eval`", site.device)


@witness(
    "TL115",
    """
    import torch

    torch.manual_seed(0)
    generator, discriminator = torch.nn.Linear(2, 4), torch.nn.Linear(4, 1)
    opt_d = torch.optim.Adam(discriminator.parameters())
    criterion = torch.nn.BCEWithLogitsLoss()
    out = discriminator(generator(torch.randn(8, 2)))
    loss_d = criterion(out, torch.zeros_like(out))
    loss_d.backward(retain_graph=True)
    opt_d.step()
    loss_g = criterion(out, torch.ones_like(out))
    error = raised(loss_g.backward)
    if isinstance(error, RuntimeError) and "modified by an inplace operation" in str(error):
        confirmed("backward(retain_graph=True), step(), then a backward through the same forward: " + describe(error).split(": [")[0])
    not_reproduced("the second backward after the step: " + (describe(error) if error else "ran"))
    """,
)
def step_between_shared_backward(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL116",
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    # lr=0 keeps the weights fixed, so each backward adds a gradient at the same point.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    batches = [(torch.randn(8, 3), torch.randn(8, 1)) for _ in range($k)]
    for x, y in batches:
        torch.nn.functional.mse_loss(model(x), y).backward()
    accumulated = model.weight.grad.clone()
    optimizer.zero_grad()
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    torch.nn.functional.mse_loss(model(x), y).backward()
    large_batch = model.weight.grad.clone()
    ratio = float(accumulated.norm() / large_batch.norm())
    if torch.allclose(accumulated, $k * large_batch, rtol=1e-4, atol=1e-6):
        confirmed(f"{$k} backwards without dividing the loss: the accumulated gradient is {ratio:.4f} x the gradient of the {$k}-batch mean loss it stands for (SGD's step is as many times larger)")
    not_reproduced(f"accumulated / large-batch gradient = {ratio:.4f}")
    """,
    k=4,
)
def accumulation_loss_not_scaled(site, entry):
    # The message names the count as the file wrote it: "accumulate over `4` backwards".
    written = site.finding.message.partition("accumulate over `")[2].partition("`")[0]
    if written.isdigit() and 2 <= int(written) <= 64:
        return entry.canonical("accumulation count taken from the finding", site.device, k=int(written))
    return entry.canonical("the accumulation count is the canonical 4", site.device)
