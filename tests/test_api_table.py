"""The API table behind TL601/TL602/TL605 (`torchlint/data/api.toml`) checked against the installed torch.

Deprecated names must exist and warn or be documented as deprecated (an entry with `observed`
must be as silent as its message says), removed names must be gone (absent, or a stub that
raises), private names must have their public twin, every replacement must exist, and every
mechanical rewrite must compute the same thing on CPU.
"""

import importlib
import re
import warnings

import pytest
from conftest import lint

from torchlint.rules.api._table import (
    KINDS,
    REWRITES,
    api_table,
    parse_version,
    read_table,
)

torch = pytest.importorskip("torch")

REQUIRED = {"name", "kind", "instead", "mechanical"}
OPTIONAL = {"replacement", "replacement-since", "deprecated-in", "removed-in", "rewrite", "device", "observed"}
INSTALLED = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
ENTRIES = sorted(api_table().values(), key=lambda entry: entry.name)


def resolve(qualified: str):
    """What `from a.b import c` would give for `a.b.c`: an attribute first, else a submodule; LookupError when neither."""
    parts = qualified.split(".")
    try:
        found = importlib.import_module(parts[0])
    except ImportError:
        raise LookupError(qualified) from None
    for end, part in enumerate(parts[1:], start=2):
        if hasattr(found, part):
            found = getattr(found, part)
            continue
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            raise LookupError(qualified) from None
    return found


def test_table_entries_are_well_formed():
    names = [raw["name"] for raw in read_table()]
    assert len(names) == len(set(names)), "duplicate names"
    for raw in read_table():
        where = raw.get("name")
        assert REQUIRED <= set(raw), f"{where}: missing {REQUIRED - set(raw)}"
        assert set(raw) <= REQUIRED | OPTIONAL, f"{where}: unknown keys {set(raw) - REQUIRED - OPTIONAL}"
        assert raw["kind"] in KINDS, where
        assert isinstance(raw["mechanical"], bool), where
        for key in ("replacement-since", "deprecated-in", "removed-in"):
            if key in raw:
                parse_version(raw[key])
        if raw["kind"] == "deprecated":
            assert "deprecated-in" in raw, f"{where}: a deprecated name says since when"
        assert "deprecated-in" not in raw or raw["kind"] != "private", f"{where}: deprecated-in is for removed and deprecated names"
        # Only torch's removals may leave nothing of torch's own in their place; a deprecated or private name has one.
        assert ("replacement" in raw) == ("replacement-since" in raw), f"{where}: replacement and replacement-since go together"
        assert "replacement" in raw or raw["kind"] == "removed", f"{where}: only a removed name may lack a replacement"
        assert ("removed-in" in raw) == (raw["kind"] == "removed"), f"{where}: removed-in is for removed names only"
        if raw["kind"] == "removed":
            assert "rewrite" not in raw and not raw["mechanical"], f"{where}: a removed name has no mechanical rewrite"
        assert raw.get("rewrite", "rename") in REWRITES, where
        assert ("device" in raw) == (raw.get("rewrite") == "prepend-device"), where
        assert not raw["mechanical"] or "rewrite" in raw, f"{where}: a mechanical replacement needs its rewrite"
        assert raw["instead"].strip(), where
        assert "observed" not in raw or raw["kind"] in ("deprecated", "removed"), f"{where}: observed is for deprecated and removed names"
        assert raw["kind"] != "removed" or "observed" in raw, f"{where}: a removed name says how the code fails (observed)"


@pytest.mark.parametrize("entry", [entry for entry in ENTRIES if entry.replacement is not None], ids=lambda entry: entry.name)
def test_replacement_exists_in_installed_torch(entry):
    resolve(entry.replacement)
    assert entry.replacement_since <= INSTALLED


# Deprecated names whose docstring does not say so: a call that shows the warning instead.
DEPRECATION_WARNINGS = {
    "torch.nn.NLLLoss2d": lambda: torch.nn.NLLLoss2d(),
    "torch.nn.utils.weight_norm": lambda: torch.nn.utils.weight_norm(torch.nn.Linear(2, 2)),
    "torch.backends.cuda.sdp_kernel": lambda: torch.backends.cuda.sdp_kernel(),
    "torch.utils._pytree._register_pytree_node": lambda: torch.utils._pytree._register_pytree_node(
        type("Box", (), {}), lambda box: ([], None), lambda values, context: None
    ),
}


def _functorch_warning(name):
    functorch = pytest.importorskip("functorch")
    function = getattr(functorch, name)
    calls = {
        "vmap": lambda: function(torch.sin),
        "grad": lambda: function(lambda x: x.sin().sum()),
        "grad_and_value": lambda: function(lambda x: x.sin().sum()),
        "vjp": lambda: function(torch.sin, torch.ones(2)),
        "jvp": lambda: function(torch.sin, (torch.ones(2),), (torch.ones(2),)),
        "jacrev": lambda: function(torch.sin),
        "jacfwd": lambda: function(torch.sin),
        "hessian": lambda: function(lambda x: x.sin().sum()),
        "functionalize": lambda: function(torch.sin),
        "make_functional": lambda: function(torch.nn.Linear(2, 2)),
        "make_functional_with_buffers": lambda: function(torch.nn.Linear(2, 2)),
        "combine_state_for_ensemble": lambda: function([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]),
    }
    return calls[name]


def _warns_deprecation(call) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return any(re.search(r"deprecat", str(warning.message), re.IGNORECASE) for warning in caught)


@pytest.mark.parametrize("entry", [entry for entry in ENTRIES if entry.kind == "deprecated"], ids=lambda entry: entry.name)
def test_deprecated_name_exists_and_is_deprecated(entry):
    found = resolve(entry.name)
    if entry.observed is not None:
        return  # its message says what torch does instead; test_observed_entries_are_silent checks that
    if re.search(r"deprecat", getattr(found, "__doc__", None) or "", re.IGNORECASE):
        return
    call = DEPRECATION_WARNINGS.get(entry.name)
    if call is None and entry.name.startswith("functorch."):
        call = _functorch_warning(entry.name.split(".", 1)[1])
    assert call is not None, f"{entry.name}: its docstring does not say deprecated; add a call that warns"
    assert _warns_deprecation(call), f"{entry.name} did not warn"


# Deprecated names whose message states that torch neither warns nor says "deprecated" in the docstring
# (only the docs pages do): a call that would show a warning if torch started to give one.
SILENT_CALLS = {
    "torch.autograd.Variable": lambda: torch.autograd.Variable(torch.ones(2, requires_grad=True)),
    # On a CPU build they warn, then fail in the call they delegate to.
    "torch.cuda.reset_max_memory_allocated": lambda: _raised(torch.cuda.reset_max_memory_allocated),
    "torch.cuda.reset_max_memory_cached": lambda: _raised(torch.cuda.reset_max_memory_cached),
}


def _raised(function):
    try:
        function()
    except Exception as error:  # what it raises is compared, not judged
        return repr(error)
    return None


@pytest.mark.parametrize("name", ["torch.cuda.reset_max_memory_allocated", "torch.cuda.reset_max_memory_cached"])
def test_old_peak_memory_resets_warn_and_call_the_new_one(name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = _raised(resolve(name))
    assert any("now calls torch.cuda.reset_peak_memory_stats" in str(warning.message) for warning in caught)
    assert error == _raised(torch.cuda.reset_peak_memory_stats)


@pytest.mark.parametrize("entry", [entry for entry in ENTRIES if entry.observed is not None and entry.kind == "deprecated"], ids=lambda entry: entry.name)
def test_observed_entries_are_silent(entry):
    assert not re.search(r"deprecat", getattr(resolve(entry.name), "__doc__", None) or "", re.IGNORECASE)
    assert not _warns_deprecation(SILENT_CALLS[entry.name])


def test_variable_returns_a_detached_alias():
    tensor = torch.ones(2, requires_grad=True)
    alias = torch.autograd.Variable(tensor)
    assert alias is not tensor and not alias.requires_grad and alias.data_ptr() == tensor.data_ptr()


def test_variable_in_a_type_check_says_the_check_holds_for_every_tensor():
    # Rounds 47 and 49: `isinstance(obj, Variable)` was told to use "the tensor itself, or x.detach()".
    text = "import torch\nfrom torch.autograd import Variable\nok = isinstance(x, Variable) or issubclass(t, (int, Variable))\n"
    uses = [finding for finding in lint(text, select=["TL602"], torch_version="2.6") if finding.location.row == 3]
    assert len(uses) == 2 and all("every tensor is an instance of it" in finding.message for finding in uses)
    assert all(finding.fix is None for finding in uses)
    assert isinstance(torch.ones(1, dtype=torch.long), torch.autograd.Variable) and not isinstance(3, torch.autograd.Variable)


def test_variable_with_requires_grad_is_told_to_keep_the_flag():
    # Round 51: `Variable(x, requires_grad=True)` was told to use "the tensor itself", which loses the flag the
    # gradient penalty's `autograd.grad(inputs=...)` needs. What the message says to write is run here against it.
    text = "import torch\nfrom torch.autograd import Variable\nv = Variable(x, requires_grad=True)\n"
    [use] = [finding for finding in lint(text, select=["TL602"], torch_version="2.6") if finding.location.row == 3]
    assert "x.detach().requires_grad_(...)" in use.message and use.fix is None
    x = torch.ones(2) * 3
    old, new = torch.autograd.Variable(x, requires_grad=True), x.detach().requires_grad_(True)
    assert (old.requires_grad, old.is_leaf, old.data_ptr()) == (new.requires_grad, new.is_leaf, new.data_ptr())


def test_variable_message_says_what_torch_does():
    [finding] = lint("import torch\nv = torch.autograd.Variable(x)\n", select=["TL602"], torch_version="2.6")
    assert "will be removed" not in finding.message
    assert "does not warn" in finding.message and "detached alias" in finding.message


# Arguments that make each removed function's stub run.
REMOVED_CALLS = {
    "torch.solve": (torch.ones(2, 1), torch.eye(2)),
    "torch.symeig": (torch.eye(2),),
    "torch.lstsq": (torch.ones(2, 1), torch.eye(2)),
    "torch.matrix_rank": (torch.eye(2),),
    "torch.eig": (torch.eye(2),),
}


@pytest.mark.parametrize("entry", [entry for entry in ENTRIES if entry.kind == "removed"], ids=lambda entry: entry.name)
def test_removed_name_is_gone(entry):
    try:
        stub = resolve(entry.name)
    except LookupError:
        return
    with pytest.raises(RuntimeError, match="is now removed"):
        stub(*REMOVED_CALLS[entry.name])


# How code using each removed name fails, run here: the message quotes the table's `observed`, which must name it.
REMOVED_USES = {
    # An attribute of it after `import torch` fails otherwise (round 52: graph-rcnn's `if torch._six.PY3:`).
    "torch._six": ["import torch._six", "from torch._six import container_abcs", "import torch; torch._six.PY3"],
    "torch.legacy": ["import torch.legacy"],
    "torch.utils.ffi": ["from torch.utils.ffi import create_extension"],
    "torch.utils.serialization.load_lua": [
        "from torch.utils.serialization import load_lua", "import torch.utils.serialization; torch.utils.serialization.load_lua",
    ],
}


@pytest.mark.parametrize("entry", [entry for entry in ENTRIES if entry.kind == "removed"], ids=lambda entry: entry.name)
def test_removed_name_fails_as_observed(entry):
    uses = REMOVED_USES.get(entry.name)
    if uses is None:
        assert entry.name in REMOVED_CALLS, f"{entry.name}: say how a use of it fails (REMOVED_USES or REMOVED_CALLS)"
        with pytest.raises(RuntimeError) as raised:
            resolve(entry.name)(*REMOVED_CALLS[entry.name])
        errors = [raised.value]
    else:
        errors = []
        for use in uses:
            with pytest.raises(Exception) as raised:
                exec(use, {})
            errors.append(raised.value)
    for error in errors:
        assert f"`{type(error).__name__}" in entry.observed, (entry.name, error)
    if len(errors) == 1:
        # One way to fail: the message quotes torch's own words, its first sentence.
        first_sentence = re.split(r"\.\s|\n", str(errors[0]))[0].rstrip(".")
        assert first_sentence in entry.observed, (entry.name, str(errors[0]))


@pytest.mark.parametrize("entry", [entry for entry in ENTRIES if entry.kind == "private"], ids=lambda entry: entry.name)
def test_private_name_has_its_public_twin(entry):
    private, public = resolve(entry.name), resolve(entry.replacement)
    if not entry.mechanical:
        return
    if isinstance(private, type) and private is not public:
        # A private subclass that adds nothing (`class _LRScheduler(LRScheduler): pass`) behaves as its base.
        assert private.__bases__ == (public,)
        assert set(vars(private)) <= {"__module__", "__doc__", "__qualname__", "__firstlineno__", "__static_attributes__"}
    else:
        assert private is public


# ---------------------------------------------------------------- mechanical rewrites, run on CPU

SETUP = """
import torch
import warnings
warnings.simplefilter("ignore")
torch.manual_seed(0)
a, b = torch.randn(3), torch.randn(4)
image = torch.randn(1, 2, 3, 3)
model = torch.nn.Linear(3, 2)
(model(a).sum() * 3).backward()
"""

# name -> (old form, new form); each sets `result`, compared with torch.equal or ==.
MECHANICAL_RUNS = {
    "torch.ger": ("result = torch.ger(a, b)", "result = torch.outer(a, b)"),
    "torch.nn.functional.upsample": (
        "result = torch.nn.functional.upsample(image, scale_factor=2, mode='bilinear')",
        "result = torch.nn.functional.interpolate(image, scale_factor=2, mode='bilinear')",
    ),
    "torch.nn.utils.clip_grad_norm": (
        "result = torch.nn.utils.clip_grad_norm(model.parameters(), 0.5), model.weight.grad",
        "result = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5), model.weight.grad",
    ),
    "torch.nn.utils.stateless.functional_call": (
        "result = torch.nn.utils.stateless.functional_call(model, {'bias': torch.zeros(2)}, (a,))",
        "result = torch.func.functional_call(model, {'bias': torch.zeros(2)}, (a,))",
    ),
    "torch.nn.NLLLoss2d": (
        "scores = torch.log_softmax(image, 1)\nresult = torch.nn.NLLLoss2d(weight=torch.tensor([0.3, 0.7]))(scores, (image[:, 0] > 0).long())",
        "scores = torch.log_softmax(image, 1)\nresult = torch.nn.NLLLoss(weight=torch.tensor([0.3, 0.7]))(scores, (image[:, 0] > 0).long())",
    ),
    "torch.cuda.memory_cached": ("result = torch.cuda.memory_cached()", "result = torch.cuda.memory_reserved()"),
    "torch.cuda.max_memory_cached": ("result = torch.cuda.max_memory_cached()", "result = torch.cuda.max_memory_reserved()"),
    # Without CUDA both fail in the same place: the old names only call the new one.
    "torch.cuda.reset_max_memory_allocated": (
        "try:\n    result = torch.cuda.reset_max_memory_allocated()\nexcept Exception as error:\n    result = repr(error)",
        "try:\n    result = torch.cuda.reset_peak_memory_stats()\nexcept Exception as error:\n    result = repr(error)",
    ),
    "torch.cuda.reset_max_memory_cached": (
        "try:\n    result = torch.cuda.reset_max_memory_cached()\nexcept Exception as error:\n    result = repr(error)",
        "try:\n    result = torch.cuda.reset_peak_memory_stats()\nexcept Exception as error:\n    result = repr(error)",
    ),
    # The amp classes: CPU builds disable CUDA autocast, so compare the configuration and what runs inside.
    "torch.cuda.amp.autocast": (
        "with torch.cuda.amp.autocast(dtype=torch.float16) as ctx:\n    out = model(a)\n"
        "result = (ctx.device, ctx.fast_dtype, ctx._enabled, ctx._cache_enabled, out)",
        "with torch.amp.autocast('cuda', dtype=torch.float16) as ctx:\n    out = model(a)\n"
        "result = (ctx.device, ctx.fast_dtype, ctx._enabled, ctx._cache_enabled, out)",
    ),
    "torch.cpu.amp.autocast": (
        "with torch.cpu.amp.autocast(dtype=torch.bfloat16) as ctx:\n    out = model(a)\n"
        "result = (ctx.device, ctx.fast_dtype, ctx._enabled, ctx._cache_enabled, out)",
        "with torch.amp.autocast('cpu', dtype=torch.bfloat16) as ctx:\n    out = model(a)\n"
        "result = (ctx.device, ctx.fast_dtype, ctx._enabled, ctx._cache_enabled, out)",
    ),
    "torch.cuda.amp.GradScaler": (
        "s = torch.cuda.amp.GradScaler(init_scale=8.0)\nresult = (s._device, s.is_enabled(), s.state_dict(), s.scale(a))",
        "s = torch.amp.GradScaler('cuda', init_scale=8.0)\nresult = (s._device, s.is_enabled(), s.state_dict(), s.scale(a))",
    ),
    "torch.cpu.amp.GradScaler": (
        "s = torch.cpu.amp.GradScaler(init_scale=8.0)\nresult = (s._device, s.is_enabled(), s.state_dict(), s.scale(a))",
        "s = torch.amp.GradScaler('cpu', init_scale=8.0)\nresult = (s._device, s.is_enabled(), s.state_dict(), s.scale(a))",
    ),
    "torch.utils.data._utils.collate.default_collate": (
        "from torch.utils.data._utils.collate import default_collate\nresult = default_collate([a, a])",
        "from torch.utils.data import default_collate\nresult = default_collate([a, a])",
    ),
    "torch.utils.data._utils.collate.default_convert": (
        "from torch.utils.data._utils.collate import default_convert\nresult = default_convert([a])",
        "from torch.utils.data import default_convert\nresult = default_convert([a])",
    ),
    "torch.optim.lr_scheduler._LRScheduler": (
        "from torch.optim.lr_scheduler import _LRScheduler as Base\n"
        "class Halve(Base):\n    def get_lr(self):\n        return [group['lr'] / 2 for group in self.optimizer.param_groups]\n"
        "opt = torch.optim.SGD(model.parameters(), lr=1.0)\nsched = Halve(opt)\nopt.step(); sched.step()\nresult = sched.get_last_lr()",
        "from torch.optim.lr_scheduler import LRScheduler as Base\n"
        "class Halve(Base):\n    def get_lr(self):\n        return [group['lr'] / 2 for group in self.optimizer.param_groups]\n"
        "opt = torch.optim.SGD(model.parameters(), lr=1.0)\nsched = Halve(opt)\nopt.step(); sched.step()\nresult = sched.get_last_lr()",
    ),
    "torch.distributed._composable.fsdp.fully_shard": (
        "from torch.distributed._composable.fsdp import fully_shard\nresult = fully_shard",
        "from torch.distributed.fsdp import fully_shard\nresult = fully_shard",
    ),
}
for _init in ("normal", "uniform", "constant", "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal"):
    _args = ", 0.3" if _init == "constant" else ""
    MECHANICAL_RUNS[f"torch.nn.init.{_init}"] = (
        f"torch.manual_seed(1)\nresult = torch.nn.init.{_init}(torch.empty(3, 4){_args})",
        f"torch.manual_seed(1)\nresult = torch.nn.init.{_init}_(torch.empty(3, 4){_args})",
    )
for _name, _code in {
    "vmap": "f(torch.sin)(image)",
    "grad": "f(lambda x: x.sin().sum())(a)",
    "grad_and_value": "f(lambda x: x.sin().sum())(a)",
    "vjp": "f(torch.sin, a)[1](torch.ones(3))",
    "jvp": "f(torch.sin, (a,), (torch.ones(3),))",
    "jacrev": "f(torch.sin)(a)",
    "jacfwd": "f(torch.sin)(a)",
    "hessian": "f(lambda x: x.sin().sum())(a)",
    "functionalize": "f(lambda x: x.clone().add_(1))(a)",
}.items():
    MECHANICAL_RUNS[f"functorch.{_name}"] = (
        f"import functorch\nf = functorch.{_name}\nresult = {_code}",
        f"import torch.func\nf = torch.func.{_name}\nresult = {_code}",
    )


def same(left, right) -> bool:
    if isinstance(left, torch.Tensor):
        return isinstance(right, torch.Tensor) and left.dtype == right.dtype and torch.equal(left, right)
    if isinstance(left, (tuple, list)):
        return type(left) is type(right) and len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[key], right[key]) for key in left)
    return left == right


def run(code: str):
    namespace = {}
    exec(SETUP + code, namespace)
    return namespace["result"]


def test_every_mechanical_entry_is_run():
    mechanical = {entry.name for entry in ENTRIES if entry.mechanical}
    assert mechanical == set(MECHANICAL_RUNS)


@pytest.mark.parametrize("name", sorted(MECHANICAL_RUNS))
def test_mechanical_replacement_computes_the_same_on_cpu(name):
    if name.startswith("functorch."):
        pytest.importorskip("functorch")
    old, new = MECHANICAL_RUNS[name]
    assert same(run(old), run(new))
