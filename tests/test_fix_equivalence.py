"""A safe fix keeps behaviour: proven by running the code before and after the fix.

Each `fixtures/fixes/NAME.py` is a small runnable program next to `NAME.py.fixed`,
what `--fix` makes of it (with `--unsafe-fixes` when its `# fixture-config:` says
`unsafe-fixes = true`); `TORCHLINT_UPDATE_FIXED=1` rewrites the `.fixed` files from
the current rules, to be read in the diff before committing. The tests check that the fix produces exactly the `.fixed`
text, that fixing again changes nothing, and, for safe fixes, that both programs
leave identical tensors behind (values, dtype, device, requires_grad, is_leaf,
grad) when run with torch on CPU from the same seeds.

CUDA cannot run here, so both programs run with every CUDA device replaced by the
CPU the same way: `"cuda"`/`"cuda:N"` literals read as `"cpu"`, and `.cuda()` on
tensors and modules is `.to("cpu")`. A fixture whose "cuda" strings name a device
type rather than a place (`torch.amp.autocast("cuda")`, disabled without CUDA just
as `torch.cuda.amp.autocast()` is; as "cpu" it would turn on CPU autocast) keeps
them with `# fixture-cuda-strings: keep`.
"""

import contextlib
import os
import random
import re
from pathlib import Path

import pytest
import torch

from conftest import FIXTURES
from test_fixtures import fixture_config
from torchlint.engine.runner import lint_text
from torchlint.fixes import fix_text
from torchlint.rules import all_rules

FIX_FIXTURES = FIXTURES / "fixes"
PAIRS = sorted(FIX_FIXTURES.glob("*.py"))
_CUDA_LITERAL = re.compile(r"""(?P<quote>["'])cuda(?::\d+)?(?P=quote)""")


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def fixed_by_torchlint(path: Path):
    text = read(path)
    config = fixture_config(text)
    return fix_text(text, lambda code: lint_text(code, path.name, config), config.unsafe_fixes, path.name), config


# ---------------------------------------------------------------- running a program


@contextlib.contextmanager
def cuda_as_cpu():
    def tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        return self.to("cpu", non_blocking=non_blocking, memory_format=memory_format)

    def module_cuda(self, device=None):
        return self.to("cpu")

    saved = torch.Tensor.cuda, torch.nn.Module.cuda, torch.get_default_dtype()
    torch.Tensor.cuda, torch.nn.Module.cuda = tensor_cuda, module_cuda
    try:
        yield
    finally:
        torch.Tensor.cuda, torch.nn.Module.cuda = saved[:2]
        torch.set_default_dtype(saved[2])


def run_program(text: str, filename: str = "<program>") -> dict:
    """Run `text` as a fresh `__main__` from fixed seeds; the tensors, modules and plain values it leaves."""
    if "# fixture-cuda-strings: keep" not in text.splitlines():
        text = _CUDA_LITERAL.sub(r"\g<quote>cpu\g<quote>", text)
    code = compile(text, filename, "exec")
    namespace = {"__name__": "__main__"}
    random.seed(0)
    torch.manual_seed(0)
    with cuda_as_cpu():
        try:
            exec(code, namespace)
        except ModuleNotFoundError as error:
            pytest.skip(f"{filename} needs {error.name}, which is not installed")
    return {name: state(value) for name, value in namespace.items() if not name.startswith("__") and state(value) is not _OPAQUE}


_OPAQUE = object()


def state(value):
    """What of a value can be compared: tensors in full, modules by mode and state, plain data as is."""
    if isinstance(value, torch.Tensor):
        # Reading .grad of a non-leaf only warns; it stays None unless retained.
        grad = value.grad if value.is_leaf or value.retains_grad else None
        return {
            "dtype": value.dtype,
            "device": value.device,
            "requires_grad": value.requires_grad,
            "is_leaf": value.is_leaf,
            "grad": None if grad is None else grad.detach(),
            "values": value.detach(),
        }
    if isinstance(value, torch.nn.Module):
        return {"training": value.training, **{key: state(tensor) for key, tensor in value.state_dict(keep_vars=True).items()}}
    if isinstance(value, (list, tuple)):
        items = [state(item) for item in value]
        return _OPAQUE if any(item is _OPAQUE for item in items) else items
    if isinstance(value, dict):
        items = {key: state(item) for key, item in value.items()}
        return _OPAQUE if any(item is _OPAQUE for item in items.values()) else items
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return value
    return _OPAQUE


def differences(before, after, where: str) -> dict:
    """Every place where two program states differ: `name.attribute` -> what differs."""
    if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor):
        try:
            # Exact (tolerance 0): a safe fix claims the same result, both programs run the same torch operations
            # in this one process from the same seeds, and CPU kernels are deterministic for a fixed input and
            # thread count. A fix that reorders arithmetic is unsafe and is compared elsewhere with a tolerance.
            torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=True, check_dtype=False, check_device=False)
        except AssertionError as error:
            return {where: str(error).splitlines()[0]}
        return {}
    if type(before) is not type(after):
        return {where: f"{type(before).__name__} before, {type(after).__name__} after"}
    if isinstance(before, dict):
        found = {}
        for key in sorted(set(before) | set(after), key=str):
            if key not in before or key not in after:
                found[f"{where}.{key}" if where else key] = "only before" if key in before else "only after"
            else:
                found.update(differences(before[key], after[key], f"{where}.{key}" if where else key))
        return found
    if isinstance(before, list):
        if len(before) != len(after):
            return {where: f"{len(before)} items before, {len(after)} after"}
        found = {}
        for index, (one, other) in enumerate(zip(before, after)):
            found.update(differences(one, other, f"{where}[{index}]"))
        return found
    return {} if before == after else {where: f"{before!r} before, {after!r} after"}


def assert_same_behaviour(before: str, after: str, filename: str = "<program>", intended=()) -> None:
    """Both programs leave the same state, except exactly where the fix is meant to change it."""
    found = differences(run_program(before, filename), run_program(after, filename + ".fixed"), "")
    unexpected = {place: what for place, what in found.items() if place not in intended}
    assert unexpected == {}, f"{filename}: the fix changed behaviour"
    missing = [place for place in intended if place not in found]
    assert missing == [], f"{filename}: the fix was meant to change these but did not"


def intended_changes(text: str) -> list:
    """`# fixture-changes: w.requires_grad, w.grad`: what a fix exists to change (a typo that made an assignment a no-op)."""
    return [
        place.strip()
        for line in text.splitlines() if line.startswith("# fixture-changes:")
        for place in line.split(":", 1)[1].split(",") if place.strip()
    ]


# ---------------------------------------------------------------- the harness can fail


def test_the_same_program_twice_gives_the_same_tensors():
    program = "import torch\nx = torch.randn(4, requires_grad=True)\ny = (x * 2).sum()\ny.backward()\nmodel = torch.nn.Linear(2, 3)\n"
    assert_same_behaviour(program, program)


@pytest.mark.parametrize(
    "after, changed",
    [
        ("import torch\nx = torch.randn(4).double()\n", {"x.dtype"}),
        ("import torch\nx = torch.randn(4) + 1e-7\n", {"x.values"}),
        ("import torch\nx = torch.randn(4).half()\n", {"x.dtype", "x.values"}),
        ("import torch\nx = torch.randn(4, requires_grad=True)\n", {"x.requires_grad"}),
        ("import torch\nx = torch.randn(4).requires_grad_().float()\n", {"x.requires_grad"}),
        ("import torch\nx = torch.randn(4)\ny = x\n", {"y"}),
        ("import torch\nx = [torch.randn(4)]\n", {"x"}),
    ],
)
def test_a_change_in_behaviour_is_caught(after, changed):
    before = "import torch\nx = torch.randn(4)\n"
    assert differences(run_program(before), run_program(after), "").keys() == changed
    with pytest.raises(AssertionError, match="changed behaviour"):
        assert_same_behaviour(before, after)


def test_leaf_and_grad_are_compared():
    leaf = "import torch\nx = torch.ones(3, requires_grad=True, dtype=torch.float64)\nx.sum().backward()\n"
    non_leaf = "import torch\nx = torch.ones(3, requires_grad=True).double()\nx.sum().backward()\n"
    assert differences(run_program(non_leaf), run_program(leaf), "").keys() == {"x.is_leaf", "x.grad"}


def test_an_intended_change_must_happen_and_nothing_else_may():
    before = "import torch\nw = torch.ones(2)\nw.require_grad = True\n"
    after = "import torch\nw = torch.ones(2)\nw.requires_grad = True\n"
    assert_same_behaviour(before, after, intended=["w.requires_grad"])
    with pytest.raises(AssertionError, match="meant to change"):
        assert_same_behaviour(before, before, intended=["w.requires_grad"])


def test_cuda_moves_run_as_cpu_moves_in_both_programs():
    before = "import torch\ndevice = 'cuda'\nx = torch.ones(2).float().cuda()\nm = torch.nn.Linear(2, 2).cuda()\n"
    after = "import torch\ndevice = 'cuda'\nx = torch.ones(2).to(device, torch.float32)\nm = torch.nn.Linear(2, 2).to(\"cuda:0\")\n"
    assert_same_behaviour(before, after)
    state = run_program(before)
    assert (state["device"], state["x"]["device"]) == ("cpu", torch.device("cpu"))
    with pytest.raises((AssertionError, RuntimeError)):  # the shim is gone afterwards: no CUDA in this build
        torch.ones(1).cuda()


# ---------------------------------------------------------------- the fixtures


def safe_fix_codes():
    return sorted(rule.code for rule in all_rules() if "safe" in rule.fix_safety.split())


@pytest.mark.parametrize("path", PAIRS, ids=lambda path: path.name)
def test_fix_produces_the_fixed_file_and_settles(path: Path):
    result, config = fixed_by_torchlint(path)
    assert result.problems == []
    expected = path.with_name(path.name + ".fixed")
    if os.environ.get("TORCHLINT_UPDATE_FIXED") == "1":
        expected.write_bytes(result.text.encode("utf-8"))
    assert result.text == read(expected)
    assert path.name.split("_")[0] in {finding.code for finding in result.fixed}, "the fixture must exercise its rule's fix"
    again = fix_text(result.text, lambda code: lint_text(code, path.name, config), config.unsafe_fixes, path.name)
    assert not again.changed


@pytest.mark.parametrize("path", [path for path in PAIRS if not fixture_config(read(path)).unsafe_fixes], ids=lambda path: path.name)
def test_safe_fix_keeps_behaviour(path: Path):
    before = read(path)
    assert_same_behaviour(before, read(path.with_name(path.name + ".fixed")), path.name, intended_changes(before))


def test_every_safe_fix_is_run_before_and_after():
    proven = set()
    for path in PAIRS:
        result, config = fixed_by_torchlint(path)
        if not config.unsafe_fixes:
            proven |= {finding.code for finding in result.fixed}
    assert [code for code in safe_fix_codes() if code not in proven] == []
