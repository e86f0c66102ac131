"""The value model (torchlint/analysis): the origins of values, as rules ask for them.

Each case marks one line with `# <-` and names the expression queried on it; origins are
shown as their first line of source, an applied module as `applied(...)`, a value nothing
is known of as `?name`, a function or class as `def Name`.
"""

import textwrap

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from conftest import make_config
from torchlint.analysis.values import Values
from torchlint.engine.context import FileContext
from torchlint.engine.walk import walk

_QUERIED = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


def origins_of(code: str, expression: str):
    code = textwrap.dedent(code)
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    module = wrapper.module
    positions = wrapper.resolve(PositionProvider)
    marked = next(row for row, line in enumerate(code.splitlines(), 1) if line.rstrip().endswith("# <-"))
    stack, candidates = [], []

    def on_visit(node):
        stack.append(node)
        if type(node) in _QUERIED and positions[node].start.line == marked and module.code_for_node(node) == expression:
            candidates.append((node, tuple(stack)))
        return True

    walk(module, on_visit, lambda node: stack.pop())
    node, node_stack = candidates[0]
    ctx = FileContext("example.py", code, module, make_config(select=["ALL"]), with_callgraph=False)
    return sorted(_shown(module, origin) for origin in Values.of(ctx).origins(node, node_stack))


def _shown(module, origin):
    if isinstance(origin.node, (cst.FunctionDef, cst.ClassDef)):
        return f"def {origin.node.name.value}"
    text = module.code_for_node(origin.node).strip().splitlines()[0]
    if origin.opaque:
        return f"?{text}" + (f" of {origin.instance_of.node.name.value}" if origin.instance_of is not None else "")
    return f"applied({text})" if origin.applied else text


CASES = {
    "a later assignment hides an earlier one": ("""
        x = 1
        x = 2
        print(x)  # <-
        """, "x", ["2"]),
    "both arms of an if reach": ("""
        if a:
            x = 1
        else:
            x = 2
        print(x)  # <-
        """, "x", ["1", "2"]),
    "an assignment under if may not run": ("""
        x = 0
        if a:
            x = 4
        print(x)  # <-
        """, "x", ["0", "4"]),
    "the right-hand side sees the value before the assignment": ("""
        out = model(x)
        out = out.view(-1)  # <-
        """, "out", ["model(x)"]),
    "a loop body sees its own later assignments": ("""
        h = init()
        for step in steps:
            y = h  # <-
            h = update(h)
        """, "h", ["init()", "update(h)"]),
    "a loop body that rebinds the name before the use hides its later assignments": ("""
        for step in steps:
            noise = make_noise().astype(float32)
            out = convert(noise)  # <-
            noise = other()
        """, "noise", ["make_noise().astype(float32)"]),
    "a rebinding in an outer loop's body hides only that loop's later assignments": ("""
        for epoch in epochs:
            h = init()
            for step in steps:
                y = h  # <-
                h = update(h)
            h = last()
        """, "h", ["init()", "update(h)"]),
    "a parameter is opaque": ("""
        def f(n):
            return n  # <-
        """, "n", ["?n"]),
    "a parameter holds what every call passes, in a module that runs its own main()": ("""
        def train(model, criterion):
            return criterion  # <-
        def main():
            train(Net(), nn.CrossEntropyLoss())
            train(Net(), criterion=nn.NLLLoss())
        main()
        """, "criterion", ["nn.CrossEntropyLoss()", "nn.NLLLoss()"]),
    "a call that passes nothing gives the default": ("""
        def _make(workers=0):
            return workers  # <-
        _make()
        _make(workers=4)
        """, "workers", ["0", "4"]),
    "a call that does not pass a parameter without default: nothing known": ("""
        def _make(workers):
            return workers  # <-
        _make(4)
        _make()
        """, "workers", ["?workers"]),
    "a public function of a library module may be called by its importers": ("""
        def train(model, criterion):
            return criterion  # <-
        def fit():
            train(Net(), nn.CrossEntropyLoss())
        """, "criterion", ["?criterion"]),
    "a function also passed as a value may be called anywhere": ("""
        def _step(criterion):
            return criterion  # <-
        _step(nn.CrossEntropyLoss())
        hooks = [_step]
        """, "criterion", ["?criterion"]),
    "a function a registry's decorator hands out may be called anywhere": ("""
        @MODELS.register
        def _step(criterion):
            return criterion  # <-
        _step(nn.CrossEntropyLoss())
        """, "criterion", ["?criterion"]),
    "torch's decorators only wrap the function": ("""
        import torch
        @torch.no_grad()
        def _evaluate(criterion):
            return criterion  # <-
        _evaluate(nn.CrossEntropyLoss())
        """, "criterion", ["nn.CrossEntropyLoss()"]),
    "a call with *args: nothing known": ("""
        def _step(model, criterion):
            return criterion  # <-
        _step(*arguments)
        """, "criterion", ["?criterion"]),
    "a function nested in another is called only there": ("""
        def run():
            def step(criterion):
                return criterion  # <-
            step(nn.MSELoss())
        """, "criterion", ["nn.MSELoss()"]),
    "self.x set from a constructor's parameter: what each construction passes": ("""
        class Trainer:
            def __init__(self, model, criterion=None):
                self.criterion = criterion
            def fit(self):
                return self.criterion  # <-
        Trainer(Net(), criterion=nn.CrossEntropyLoss()).fit()
        """, "self.criterion", ["nn.CrossEntropyLoss()"]),
    "a method's parameters hold what its calls through the class's instances pass": ("""
        class Trainer:
            def fit(self, loader, epochs=1):
                return loader  # <-
        def main():
            trainer = Trainer()
            trainer.fit(DataLoader(d))
            Trainer().fit(loader=DataLoader(e), epochs=3)
        main()
        """, "loader", ["DataLoader(d)", "DataLoader(e)"]),
    "a method also read as a bound method may be called anywhere: its parameters stay unknown": ("""
        class Trainer:
            def fit(self, loader):
                return loader  # <-
        trainer = Trainer()
        trainer.fit(DataLoader(d))
        callback = trainer.fit
        """, "loader", ["?loader"]),
    "a method called through a receiver not followed: its parameters stay unknown": ("""
        class Trainer:
            def fit(self, loader):
                return loader  # <-
        Trainer().fit(DataLoader(d))
        make_trainer().fit(DataLoader(e))
        """, "loader", ["?loader"]),
    "a method of a library module's public class may be called by its importers": ("""
        class Trainer:
            def fit(self, loader):
                return loader  # <-
        def run():
            Trainer().fit(DataLoader(d))
        """, "loader", ["?loader"]),
    "a loop over a dict's items: the values": ("""
        loaders = dict(train=DataLoader(a), val=DataLoader(b))
        for phase, loader in loaders.items():
            print(loader)  # <-
        """, "loader", ["DataLoader(a)", "DataLoader(b)"]),
    "a loop over a dict's values, and over enumerate of a list": ("""
        loaders = {"train": DataLoader(a), "val": DataLoader(b)}
        for index, batches in enumerate([loaders["val"]]):
            print(batches)  # <-
        """, "batches", ["DataLoader(b)"]),
    "a loop over zip: each argument's items": ("""
        for model, optimizer in zip([Net()], [Adam(p)]):
            print(optimizer)  # <-
        """, "optimizer", ["Adam(p)"]),
    "a loop over a DataLoader: nothing known of the batches": ("""
        loader = DataLoader(d)
        for batch in loader:
            print(batch)  # <-
        """, "batch", ["?batch"]),
    "a wrapper's .module is the module it wraps": ("""
        import torch.nn as nn
        model = nn.DataParallel(Net())
        print(model.module)  # <-
        """, "model.module", ["Net()"]),
    "the .module of an object that wraps nothing is not followed": ("""
        holder = Holder()
        print(holder.module)  # <-
        """, "holder.module", ["holder.module"]),
    "a function sees the module's bindings that reach its def, and every later one": ("""
        class Net: pass
        class Net: pass
        def build():
            return Net  # <-
        Net = make_net()
        """, "Net", ["def Net", "make_net()"]),
    "a module variable read in a function: every assignment": ("""
        workers = 0
        def make():
            return workers  # <-
        workers = 2
        """, "workers", ["0", "2"]),
    "unpacking a tuple": ("""
        a, (b, c) = 1, (2, 3)
        print(b)  # <-
        """, "b", ["2"]),
    "a dict subscript with a constant key": ("""
        cfg = {"workers": 0, "batch": 32}
        print(cfg["workers"])  # <-
        """, 'cfg["workers"]', ["0"]),
    "a dict subscript with an unknown key: every value": ("""
        loaders = {"train": DataLoader(a, num_workers=4), "val": DataLoader(b)}
        for batch in loaders[phase]:  # <-
            pass
        """, "loaders[phase]", ["DataLoader(a, num_workers=4)", "DataLoader(b)"]),
    "module methods return the module": ("""
        model = Net()
        if cuda:
            model = model.cuda()
        model = model.to(device)
        print(model)  # <-
        """, "model", ["Net()"]),
    "identity wrappers": ("""
        import torch
        from torch.autograd import Variable
        x = Variable(torch.ones(3))
        model = torch.nn.DataParallel(Net())
        print(x, model)  # <-
        """, "x", ["torch.ones(3)"]),
    "a function's return values": ("""
        def make(n):
            if n:
                return DataLoader(d, num_workers=n)
            return None
        loader = make(2)
        print(loader)  # <-
        """, "loader", ["DataLoader(d, num_workers=n)", "None"]),
    "a def is its own origin": ("""
        def collate(batch):
            return batch
        f = collate
        print(f)  # <-
        """, "f", ["def collate"]),
    "a model call: what forward returns, through a tuple": ("""
        import torch.nn as nn
        class D(nn.Module):
            def __init__(self):
                super().__init__()
                self.adv = nn.Linear(4, 1)
                self.aux = nn.Sequential(nn.Linear(4, 10), nn.Softmax(dim=1))
            def forward(self, x):
                return self.adv(x), self.aux(x)
        discriminator = D()
        validity, label = discriminator(images)
        loss = criterion(label, y)  # <-
        """, "label", ["applied(nn.Softmax(dim=1))"]),
    "a model rebound through cuda() keeps its forward": ("""
        import torch
        class Net(torch.nn.Module):
            def forward(self, x):
                return torch.softmax(self.fc(x), dim=1)
        net = Net()
        if torch.cuda.is_available():
            net = net.cuda()
        out = net(x)
        print(out)  # <-
        """, "out", ["torch.softmax(self.fc(x), dim=1)"]),
    "self.attribute assigned in __init__": ("""
        class M:
            def __init__(self):
                self.loader = DataLoader(d, num_workers=0)
            def run(self):
                return self.loader  # <-
        """, "self.loader", ["DataLoader(d, num_workers=0)"]),
    "cls.x set in a classmethod, read as self.x": ("""
        class T:
            @classmethod
            def setUpClass(cls):
                cls.outputs = make()
            def test(self):
                return self.outputs  # <-
        """, "self.outputs", ["make()"]),
    "self.x joins what the class body and the methods bind": ("""
        class T:
            outputs = first()
            def setUp(self):
                self.outputs = second()
            def test(self):
                return self.outputs  # <-
            outputs = third()
        """, "self.outputs", ["first()", "second()", "third()"]),
    "self.x of a method defined in the class body is not known": ("""
        class T:
            def outputs(self):
                return make()
            def test(self):
                return self.outputs  # <-
        """, "self.outputs", ["self.outputs"]),
    "a static method's first parameter is not the instance": ("""
        class T:
            outputs = make()
            @staticmethod
            def test(self):
                return self.outputs  # <-
        """, "self.outputs", ["self.outputs"]),
    "the item of a class body's comprehension, read by iterating it": ("""
        class T:
            outputs = [make(size) for _ in range(10)]
            def test(self):
                for output in self.outputs:
                    print(output)  # <-
        """, "output", ["make(size)"]),
    "a class body's comprehension whose item names the class's own names is not read": ("""
        x = first()
        class T:
            x = second()
            outputs = [x for _ in range(10)]
            def test(self):
                for output in self.outputs:
                    print(output)  # <-
        """, "output", ["?output"]),
    "a comprehension's item naming an inner comprehension's own target": ("""
        outputs = [wrap([r() for _ in range(5)]) for _ in range(10)]
        for output in outputs:
            print(output)  # <-
        """, "output", ["wrap([r() for _ in range(5)])"]),
    "a name bound in a class body, read there": ("""
        class Config:
            workers = 0
            loader = make(workers)  # <-
        """, "workers", ["0"]),
    "an import is an origin to resolve": ("""
        import torch
        t = torch
        print(t)  # <-
        """, "t", ["torch"]),
    "an if chain binding in every arm hides what came before": ("""
        model = None
        if arch == "a":
            model = A()
        elif arch == "b":
            model = B()
        else:
            model = C()
        print(model)  # <-
        """, "model", ["A()", "B()", "C()"]),
    "an arm that raises counts as binding": ("""
        model = None
        if arch == "a":
            model = A()
        else:
            raise ValueError(arch)
        print(model)  # <-
        """, "model", ["A()"]),
    "an if chain without else hides nothing": ("""
        model = None
        if arch == "a":
            model = A()
        elif arch == "b":
            model = B()
        print(model)  # <-
        """, "model", ["A()", "B()", "None"]),
    "an arm that binds only in a nested block does not hide": ("""
        model = None
        if arch == "a":
            if pretrained:
                model = A()
        else:
            model = C()
        print(model)  # <-
        """, "model", ["A()", "C()", "None"]),
    "inside the chain the arm sees what came before": ("""
        model = make
        if arch == "a":
            model = model(1)
        else:
            model = model(2)  # <-
        """, "model", ["?make"]),
    "another arm of the same if never reaches": ("""
        model = make
        if arch == "a":
            model = model(1)
        elif arch == "b":
            model = model(2)  # <-
        """, "model", ["?make"]),
    "in a loop an arm reaches the other on the next pass": ("""
        previous = None
        for x in data:
            if first:
                previous = x
            else:
                print(previous)  # <-
        """, "previous", ["?x", "None"]),
    "an unknown name": ("""
        print(undefined)  # <-
        """, "undefined", ["?undefined"]),
    "a call of an unknown method is its own origin": ("""
        y = x.foo()
        print(y)  # <-
        """, "y", ["x.foo()"]),
    "a method called through an instance of a class of the file returns what the method returns": ("""
        class Net(nn.Module):
            def __init__(self):
                self.criterion = nn.CrossEntropyLoss()
            def train_model(self, x, y):
                self.cost = self.criterion(self(x), y)
                return self.cost
        model = Net()
        cost = model.train_model(x, y)
        print(cost)  # <-
        """, "cost", ["applied(nn.CrossEntropyLoss())"]),
    "a method called on self returns what it, or a subclass's override, returns": ("""
        class Base:
            def train(self, x, y):
                loss = self._forward(x, y)
                print(loss)  # <-
            def _forward(self, x, y):
                return F.cross_entropy(x, y)
        class Child(Base):
            def _forward(self, x, y):
                return F.nll_loss(x, y)
        """, "loss", ["F.cross_entropy(x, y)", "F.nll_loss(x, y)"]),
    "a method on self an instance attribute may hide is its own origin": ("""
        class Trainer:
            def __init__(self, hook):
                self._forward = hook
            def train(self, x, y):
                loss = self._forward(x, y)
                print(loss)  # <-
            def _forward(self, x, y):
                return F.cross_entropy(x, y)
        """, "loss", ["self._forward(x, y)"]),
    "a method of a receiver that may be something else is its own origin": ("""
        class Net(nn.Module):
            def train_model(self, x, y):
                return criterion(self(x), y)
        model = Net() if fresh else pretrained
        cost = model.train_model(x, y)
        print(cost)  # <-
        """, "cost", ["model.train_model(x, y)"]),
    "a method the instance's class does not define is its own origin": ("""
        class Net(Base):
            def train_model(self, x, y):
                return criterion(self(x), y)
        model = Net()
        cost = model.evaluate(x, y)
        print(cost)  # <-
        """, "cost", ["model.evaluate(x, y)"]),
    "a marimo cell's parameter is what the one cell that returns the name binds it to": ("""
        import marimo
        app = marimo.App()

        @app.cell
        def _(nn):
            model = nn.Linear(4, 2)
            model = model.cuda()
            return (model,)

        @app.cell
        def _(model):
            print(model)  # <-
            return
        """, "model", ["nn.Linear(4, 2)"]),
    "a name two marimo cells return stays unknown": ("""
        import marimo
        app = marimo.App()

        @app.cell
        def _():
            model = 1
            return (model,)

        @app.cell
        def _():
            model = 2
            return (model,)

        @app.cell
        def _(model):
            print(model)  # <-
            return
        """, "model", ["?model"]),
    "a function's parameter outside a marimo notebook is not another function's return": ("""
        def _():
            model = 1
            return (model,)

        def _(model):
            print(model)  # <-
            return
        """, "model", ["?model"]),
    "a comprehension's loop variable holds the items of what it iterates, as a for loop's": ("""
        nets = [Net(), Small()]
        scores = [evaluate(net) for net in nets]  # <-
        """, "net", ["Net()", "Small()"]),
    "a comprehension's loop variable hides a name of the function, and unpacks as a for target does": ("""
        net = Other()
        pairs = [("a", Net()), ("b", Small())]
        scores = {name: evaluate(net) for name, net in pairs}  # <-
        """, "net", ["Net()", "Small()"]),
    "a comprehension's first iterable is read around it": ("""
        net = [Net()]
        scores = [evaluate(net) for net in net]  # <-
        """, "net", ["Net()"]),
    "an inner comprehension's clause hides the outer one's name": ("""
        rows = [[Small()]]
        scores = [[f(net) for net in row] for net in [Net()] for row in rows]  # <-
        """, "net", ["Small()"]),
    "a starred comprehension target: nothing known": ("""
        scores = [f(rest) for first, *rest in [(Net(), Small())]]  # <-
        """, "rest", ["?rest"]),
    "a comprehension's loop variable through a parameter": ("""
        def evaluate(env, net):
            return net  # <-
        if __name__ == "__main__":
            nets = [Net() for _ in range(3)]
            scores = [evaluate(env, net) for net in nets]
        """, "net", ["Net()"]),
    "an element of a comprehension that repeats its item is the item": ("""
        nets = [Net() for _ in range(5)]
        print(nets[0])  # <-
        """, "nets[0]", ["Net()"]),
    "a deep copy holds the value it copies": ("""
        import copy
        best = Net()
        candidate = copy.deepcopy(best)
        print(candidate)  # <-
        """, "candidate", ["Net()"]),
    "a copy under an imported name too": ("""
        from copy import deepcopy
        model = Net()
        ema = deepcopy(model.to(device))
        print(ema)  # <-
        """, "ema", ["Net()"]),
    "a parameter callers elsewhere may give names the project class its annotation names": ("""
        class Net(nn.Module):
            pass

        class Trainer:
            def __init__(self, net: Net, size: int):
                self.net = net

            def save(self):
                print(self.net)  # <-
        """, "self.net", ["?net of Net"]),
    "an annotation of a library's class names nothing": ("""
        def save(model: nn.Module):
            print(model)  # <-
        """, "model", ["?model"]),
    "where every call is seen, what it passes wins over the annotation": ("""
        class Net(nn.Module):
            pass

        def _save(state: Net):
            print(state)  # <-

        _save(Net().state_dict())
        """, "state", ["Net().state_dict()"]),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_origins(case):
    code, expression, expected = CASES[case]
    assert origins_of(code, expression) == sorted(expected)


def test_constant_follows_names_and_config_dicts():
    code = textwrap.dedent("""
        num_workers = 0
        cfg = {"workers": 0}
        loader = DataLoader(d, num_workers=num_workers)
    """)
    assert origins_of(code.replace("num_workers=num_workers)", "num_workers=num_workers)  # <-"), "num_workers") == ["0"]


def test_dtype_questions_stop_at_casts():
    code = textwrap.dedent("""
        import torch
        x = torch.from_numpy(array)
        x = x.float()
        print(x)  # <-
    """)
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    module = wrapper.module
    ctx = FileContext("example.py", code, module, make_config(select=["ALL"]), with_callgraph=False)
    statement = module.body[-1].body[0]
    stack = (module, module.body[-1], statement)
    use = statement.value.args[0].value
    values = Values.of(ctx)
    assert [module.code_for_node(o.node) for o in values.origins(use, stack)] == ["torch.from_numpy(array)"]
    assert [module.code_for_node(o.node) for o in values.origins(use, stack, through_casts=False)] == ["x.float()"]


def test_paths_that_meet_again_are_followed_once(monkeypatch):
    """fixtures/projects/model_registry_factory: the five optional steps of `get_model_on` reach its `return` by 32
    paths, each to a registry of nine model classes. Each question follows an expression once per depth (740 steps
    for the file); followed again on every path, it took 146,864, and a segmentation project of that shape did not
    finish in 12 minutes."""
    from conftest import FIXTURES
    from torchlint.engine.runner import lint_file

    steps = []
    follow = Values._follow
    monkeypatch.setattr(Values, "_follow", lambda self, *args: steps.append(1) or follow(self, *args))
    result = lint_file(str(FIXTURES / "projects" / "model_registry_factory" / "train.py"), make_config(select=["ALL"]))
    assert [finding.code for finding in result.findings] == ["TL401", "TL401"]
    assert len(steps) < 5000
