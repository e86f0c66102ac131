import re
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.conversions import computed_cuda_device, conversion, implements_method
from torchlint.analysis.devices import CUDA_STRING, in_a_cuda_branch, is_cuda_string, moves_a_storage, names_device
from torchlint.analysis.facts import project_import_names
from torchlint.analysis.intent import CUDA_ONLY_LIBRARIES, FALLBACK, Sites, names_module, project_intent
from torchlint.analysis.loops import counters_around
from torchlint.analysis.modules import ModuleClasses
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.project import PROJECT
from torchlint.analysis.summaries import SUMMARIES, function_facts, imported_function_showing
from torchlint.analysis.syntax import call_argument
from torchlint.analysis.values import Values, inherited_method
from torchlint.engine.context import last_parts
from torchlint.engine.facts import recognizes
from torchlint.engine.scopes import dotted_name
from torchlint.engine.walk import walk, walk_visitor
from torchlint import semantics
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

AVAILABILITY_CHECKS = frozenset({
    "torch.cuda.is_available", "torch.cuda.device_count", "torch.backends.mps.is_available",
    "torch.backends.cuda.is_built", "torch.backends.mps.is_built",
})
# A file calling these was written for CUDA machines only: hard-coded CUDA is its premise.
CUDA_ONLY = frozenset({"torch.cuda.set_device"})
PROCESS_GROUP = frozenset({"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"})
# Keyword arguments that take a device, whatever the call.
DEVICE_KEYWORDS = frozenset({"device", "map_location"})
# A file importing a library of `CUDA_ONLY_LIBRARIES` unconditionally cannot run without CUDA whatever device it names.
# Building a C++/CUDA extension: CUDA-only when it compiles CUDA sources.
EXTENSION_LOADERS = frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"})
CUDA_EXTENSION = frozenset({"torch.utils.cpp_extension.CUDAExtension"})
_CUDA_SOURCE = re.compile(r".*\.cuh?")
# How far `_imports_project_cuda_build` follows a file's imports into its project.
_MAX_BUILD_DEPTH = 4
_MAX_BUILD_MODULES = 32
# The legacy typed constructors of CUDA tensors (`torch.cuda.FloatTensor([0.2, 0.8])`): a tensor made on the GPU.
CUDA_TENSOR_TYPES = frozenset(
    f"torch.cuda.{kind}Tensor"
    for kind in ("Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long", "Bool")
)
# `with torch.cuda.device(1):` names a GPU by its index too.
CUDA_DEVICE_CONTEXT = "torch.cuda.device"
# Words that make a test decorator or skip condition about GPUs (`skip_if_lt_x_gpu`, `requires_cuda`, `HAS_GPU`).
_GPU_WORD = re.compile(r"cuda|gpu", re.IGNORECASE)
# ... and that make a name with such a word a gate rather than a helper that moves tensors (`to_cuda(x)`).
_GATE_WORD = re.compile(r"skip|require|only|needs|mark", re.IGNORECASE)
_SKIPS = frozenset({"skipif", "skipunless"})
# How a run knows it is one of several processes: `world_size`, `torch.distributed.is_initialized()`.
_WORLD_SIZE = re.compile(r"world_size|num_processes|num_gpus|ngpus", re.IGNORECASE)
_DISTRIBUTED_FLAG = re.compile(r"(?:is_|use_)?(?:distributed|ddp)", re.IGNORECASE)
# The fact a function shows when it decides for CUDA (`_decides_cuda`), for files that call it from another file.
DECIDES_CUDA = "decides-cuda"


def _decides_cuda(call: cst.Call, name: Optional[str]) -> bool:
    """The call (of `name`) checks whether CUDA is there, or sets the program up for CUDA machines only."""
    if name is None:
        return False
    if name in AVAILABILITY_CHECKS or name.startswith("torch.accelerator.") or name in CUDA_ONLY:
        return True
    return name in PROCESS_GROUP and semantics.literal(call_argument(call, 0, "backend"), None) == "nccl"


def _cited(evidence, root: str, own) -> str:
    """What the message adds of the evidence that decided: a CPU path elsewhere in the project, or a device fallback
    the file's own text shows that its code does not (in a comment or a string, or on a `torch` the file does not
    import): "no availability check in this file" and "a device fallback in this file" would contradict. The file's
    weaker CPU paths (`device = "cpu"`) are cited as the project's: they check nothing."""
    if evidence is None:
        return ""
    if evidence is own and evidence.what == FALLBACK:
        # A notebook's line is one of its code cells joined, which no editor shows (`Evidence.describe`).
        where = "" if evidence.path.endswith(".ipynb") else f" at line {evidence.line}"
        return (
            f"; this file's text shows {evidence.what}{where}, `{evidence.text}`, but not as a call of torch's "
            "(a comment, a string, or a `torch` not seen imported)"
        )
    return f"; this project also runs on the CPU: {evidence.describe(root)}"


@recognizes(cst.Call, last_parts(CUDA_ONLY | PROCESS_GROUP))
def decides_cuda(call: cst.Call, ctx) -> Optional[str]:
    """A project helper that sets the program up for CUDA only (`torch.cuda.set_device`, an NCCL process group:
    `utils.init_distributed_mode(args)`): a script calling it is written for CUDA machines. A mere availability
    check in a helper (`set_seed` guarding `manual_seed_all`) decides nothing for the script's own `.cuda()`."""
    name = ctx.qualified_name(call.func)
    return DECIDES_CUDA if name is not None and _decides_cuda(call, name) and name not in AVAILABILITY_CHECKS else None


class CudaWithoutFallback(Rule):
    """
    ## What it does
    Flags each hard-coded CUDA device (`"cuda"` or `"cuda:N"` passed as a device,
    `torch.device("cuda")`, `.cuda()`, `device = "cuda"`, or under any name the file
    passes as a device: `target = "cuda"`, then `.to(target)`), and each tensor built by a
    legacy typed CUDA constructor (`torch.cuda.FloatTensor([0.2, 0.8])`, `LongTensor`,
    `ByteTensor`, `DoubleTensor`, `HalfTensor`, `IntTensor`, `BoolTensor`, ...), in a file that never checks
    whether CUDA is there (`torch.cuda.is_available()`, `torch.cuda.device_count()`,
    `torch.backends.mps.is_available()`, `torch.accelerator.*`).

    ## Why is this bad?
    On a machine without a GPU (a laptop, a CI runner, a CPU-only build of torch)
    the script dies at the first tensor or module sent to CUDA:
    `AssertionError: Torch not compiled with CUDA enabled`, or for `.cuda(0)`
    `RuntimeError: Cannot access accelerator device when none is available` (both
    observed on torch 2.13's CPU build; `torch.device("cuda")` itself builds fine,
    the error comes when it is used); a typed CUDA constructor raises `TypeError: type
    torch.cuda.FloatTensor not available. Torch not compiled with CUDA enabled.` (the
    same build); a storage moved by a `map_location` function (`torch.load(path,
    map_location=lambda storage, loc: storage.cuda())`) raises `TypeError: '<' not
    supported between instances of 'NoneType' and 'int'` (the same build). A type named
    without a call (`dtype = torch.cuda.FloatTensor if cuda else torch.FloatTensor`,
    `x.type(torch.cuda.FloatTensor)`) is not flagged.

    Not flagged: files with any availability check, or that call a function of their
    project that sets the program up for CUDA only (`utils.init_distributed_mode(args)`,
    which calls `init_process_group("nccl")` and `torch.cuda.set_device`; followed into
    the project's files and the functions they call; a helper's availability check alone,
    as in a `set_seed`, does not count), or such a method of a project class on an
    instance of it, its own or inherited from a base of the project (pix2pixHD's
    `opt = TrainOptions().parse()`, whose `BaseOptions.parse` calls `torch.cuda.set_device`
    for the default `--gpu_ids 0`: in a branch, `if len(opt.gpu_ids) > 0:`, as it counts in
    the file itself, so a script run with `--gpu_ids -1` is not reported), or that import a module-level name of their
    project whose value checks (a test suite's `_MARK_REQUIRE_GPU = {"condition": not
    torch.cuda.is_available(), ...}`, used in `pytest.mark.skipif(**_MARK_REQUIRE_GPU)`);
    devices that come from a
    variable, a function parameter (its default included) or a command-line argument
    (including `add_argument(..., default="cuda")`), `.cuda(rank)` included; code
    in a branch taken only when the program asks for CUDA (`if args.cuda:`,
    `if backend == "cuda":`, `x.cuda() if use_gpu else x`, `if not args.no_cuda:`,
    `if not args.cpu:` after a `--cpu` option, `if x.is_cuda:`, the rest of a function after an
    `assert` that holds only with CUDA, `assert grad_output.is_cuda`, or an option read by a key
    whose last dotted part names CUDA or a GPU: `if opt["data.cuda"]:`, as
    `vars(args)` holds `--data.cuda`, or a choice compared with "GPU": `if opt.mode == "GPU":`,
    also through a flag set from such a test, `TEST_MODE = True if opt.test_mode == "GPU"
    else False`, then `if TEST_MODE:`); `def cuda(...)` methods; a `torch.device("cuda")` only
    compared with another device (`if t.device != torch.device("cuda"):`, which a CPU build runs: the move
    under it is what is reported);
    `.cuda()` on a module with no parameters or buffers, which moves nothing and runs on
    a CPU build: a torch layer such as `nn.LogSoftmax(dim=1)`, a torch loss given no
    weight (`nn.CrossEntropyLoss().cuda()` or `nn.NLLLoss(None)`: its `weight` buffer is
    None), or a Module class of the project that holds neither (a criterion built by a
    project's `get_criterion(p)`, followed into its file; a class whose torch loss takes
    the `weight` parameter of its `__init__`, `nn.NLLLoss2d(weight, ...)`, when the call
    building it gives None or leaves the default None: `CrossEntropyLoss2d(ignore_index=255)`;
    given a tensor, it holds one and is reported);
    a device setting for another module: a module-level `device = "cuda"` (or
    `= torch.device("cuda")`, or in a module that is not a script or notebook, a
    settings object's `config.device = "cuda"`) that nothing in the file reads, as in
    a config module the training script imports; a module-level `device = "cuda"` that no
    read sees, because the file sets the name again first (a notebook's later
    `device = torch.device("cpu")`, with functions in between that take `device` as a
    parameter; a read inside a function may run at any time, so it sees every
    module-level value of the name). And files written for CUDA machines only:
    `torch.cuda.set_device(...)`, `init_process_group(backend="nccl")`; two or more
    GPUs named by index (`.cuda(0)` and `"cuda:1"`, `torch.cuda.device(1)`,
    `DataParallel(model, device_ids=[0, 1])`: a model split over devices or replicated
    on them), or a GPU named by the counter of a loop around it, one per pass
    (`.cuda(i)`, `torch.device("cuda", i)` or `f"cuda:{i}"` in `for i in range(n):` or
    `for i, task in enumerate(tasks):`; a GPU from a setting, `.cuda(args.gpu)`, is
    one GPU); an unconditional import of a library that runs only on
    NVIDIA GPUs (`transformer_engine`, `msamp`, `apex`, `flash_attn`, `pycuda`,
    `cupy`, `tensorrt`, `torch_tensorrt`, `numba.cuda`; one imported in a function,
    a branch, or a `try` whose handler does not raise again is optional and does not
    count); building a CUDA extension (`torch.utils.cpp_extension.load(...)` with `.cu`
    sources, `load_inline(cuda_sources=...)`, `CUDAExtension(...)`); importing a
    module that the project's `setup.py` (next to the file, or at the top of its
    package) builds as a `CUDAExtension`, as a test of custom kernels does, or at the
    file's top (not in a function, a branch or a `try`) one that any build script of the
    project builds so, found by the extension's name (`import build_adjacency_matrix`,
    built by `extension/adjacency_matrix/setup.py`); importing
    a project module that compiles CUDA code when imported (`cpp_extension.load` of
    `.cu` sources at its top level, there or in a project module it imports, four
    imports deep: StyleGAN2's `op` package; for a module of a package, also in the package's
    `__init__.py`, which runs first), which fails without CUDA first. What that
    gives up: such files are not checked at all, so a single-GPU `.cuda()` in one of
    them goes unreported, and a config module's `"cuda"` is left to its reader,
    where it arrives as a variable and is not reported either.

    Not flagged either, because the program around it shows it never runs without a GPU:
    code in a test function or class gated on GPUs (`@skip_if_lt_x_gpu(2)`, a decorator
    or mark named for CUDA or GPUs such as `@requires_cuda` or `@pytest.mark.gpu`,
    `@unittest.skipIf(not TEST_CUDA, ...)` or `@pytest.mark.skipif(...)` whose condition or
    reason names CUDA or GPUs, a module-level `pytestmark` holding one, or a decorator
    function of the project whose body uses such a gate); code that runs only in a
    distributed run (in `if world_size > 1:`, `if dist.is_initialized():` or
    `if args.distributed:`, or after `if world_size == 1: return` or
    `if not dist.is_initialized(): return` in the same block); and the helper modules of a
    CUDA-only program, decided by the project's intent below. The parameter-free module
    exemption above holds for a class whose `forward` unpacks its input's shape into local
    names (`b, c, h, w = x.size()`); one unpacking into attributes (`self.h, self.w = shape`)
    may hold state and is reported.

    ### Project intent
    Whether code has no CPU path is a fact about the program, so each project (the nearest
    folder above the file with `.git`, `pyproject.toml`, `setup.py`, `setup.cfg` or
    `.github`, or the configured root) is read once per run, as text, for evidence, the
    first that matches in a file deciding for it: a device fallback
    (`"cuda" if torch.cuda.is_available() else "cpu"`) shows a CPU path; then CUDA-only
    design: an NCCL backend, `assert torch.cuda.is_available()`, `torch.cuda.set_device`,
    `dist.get_rank()` at module level, a CUDA extension, a module-level import of a
    CUDA-only library or of a CUDA extension of the project (`CUDAExtension("name", ...)`
    in any of its files); then, weaker, a CPU path again: a `--device` argument or `device`
    parameter defaulting to `"cpu"`, `device = "cpu"` (not `map_location="cpu"`: CUDA-only
    programs load checkpoints on the CPU to spare GPU memory). A GitHub
    workflow that runs pytest on a hosted runner (`runs-on: ubuntu-latest`) or installs the
    CPU torch wheel is a CPU path for the project's test files. A file is judged by its own
    evidence first (CUDA-only: not reported), a test file then by the CI, then by the
    project modules it imports: one that imports a CUDA-only library or a CUDA extension of
    the project at its top (a CuPy kernel of the program's own, `correlation.py` doing
    `import cupy`; layumi's `gnn_reranking.py` doing `import build_adjacency_matrix`) makes the file
    CUDA-only too, as the program cannot do its work without a GPU; and then by what
    reaches it: its importers in the project, followed six imports up until each route meets
    evidence. It is not reported when every route ends at CUDA-only evidence (a helper whose
    only importer initialises NCCL); it is reported when a route meets a CPU path, and the
    message then ends with which, and where: "this project also runs on the CPU: a
    `--device` default of "cpu", `add_argument("--device", default="cpu"` in evaluate.py:7"
    (or, for a device fallback in the file's own text, that its code does not show it: one in a comment
    or a string, or on a `torch` the file does not import);
    or when a route ends at a file that shows neither, as every file that nothing imports
    does (a script is reported as before). Code in a module-level function or class (a
    method included) counts only the importers that import that function or class by name
    (`from pkg.core import prepare_task`), import the whole module (`import pkg.core`,
    `from pkg import core`: any of it may be used) or star-import it, so a helper imported
    only by programs that assert CUDA stays unreported when a test imports its module for
    another, device-free function. A function or class that others of its file name (a class
    built only by another, as few-shot's `AttentionLSTM` by `MatchingNetwork`) is reached
    through them too: an importer of any of them counts. One that module-level code names
    (an alias, a call on import; not a mere assignment to its name, as `barrier = dummy` in a
    branch for builds without `torch.distributed`), or that no importer names, counts every
    importer, as code at module level does. An importer of the whole module counts where its
    text uses the function or class (`utils.distributed.barrier()`, or `utils.distributed`
    passed on whole; not `utils.distributed.all_reduce_mean(...)` alone), and a package's
    `__init__.py` that imports the module (`from . import distributed`) or the name passes
    the question on to its own importers, so a helper called only by the file that starts
    NCCL, through the package, is judged by that file. The scan reads at most 3,000 `.py` files and
    30 MB, skips files over 1 MB and hidden and environment folders, and is kept with the
    cache's summaries for the listing it was read from (paths, sizes, modification times).

    What that gives up: evidence is read from text, not code: a `"nccl"` string anywhere
    or a `set_device` in a branch makes a file CUDA-only, and a fallback in a comment counts
    as one in code; an importer other than a package's `__init__.py` counts as a whole once
    it reaches the helper (any of its code may call it), a use is read from text (an alias
    of the module, `d = utils.distributed`, counts as passing it on whole), and any name a
    function's code holds counts as naming another function or
    class (a parameter or an attribute spelled alike included); imports are followed only
    where they name a project file by path (not `importlib`, not a console script), so a
    helper reached some other way is judged as if nothing imported it (reported); a cached
    result is checked against the files whose evidence decided it (and, where nothing was
    reported, against the file's importers), not against a file newly made to import it;
    a test gated by a helper with another name and no such gate in its body (`@slow_test`
    skipping on a missing `nvidia-smi`) is still reported, and a gate's condition is
    trusted by its words (`skipif(not HAS_GPU)`) without following the name.

    Not seen as written for CUDA (so still reported): kernels built by the build
    scripts of torch before 1.0 (`torch.utils.ffi.create_extension(..., with_cuda=True)`,
    gone from torch since), so a file checking such a kernel against `.cuda()` tensors
    is reported (faster-rcnn.pytorch's `compare_grid_sample`).

    ## Fix safety
    No fix: where the fallback belongs (one `device` chosen at start-up and passed
    around) depends on the program's structure.
    """

    code = "TL205"
    name = "cuda-without-fallback"
    # Every site is a `.cuda()` call or a "cuda"/"cuda:N" string literal (spelled out: not escaped, not split in parts).
    triggers = words("cuda")
    preview = (
        "In preview after held-out rounds 54-56 (docs/precision.md): 31 of 45 findings true at first sight. The false "
        "ones run only where the program's design has a GPU already: helpers of a CUDA-only trainer that a CPU demo "
        "reaches only through their package's `__init__` (a prefetcher built on `torch.cuda.Stream()`, evaluators "
        "casting every batch to `torch.cuda.FloatTensor`, 6), a CPU fallback taken only after a CUDA out-of-memory "
        "error that moves its result back with `.cuda()` (4), a TensorRT branch that only an option forcing the GPU "
        "turns on (2) (round 56, not fixed), and a device built only to be compared (round 54, fixed). The rule leaves "
        "preview again when two rounds in a row read it at least 9 in 10 true."
    )
    message = (
        "hard-coded CUDA device and no availability check in this file: without a GPU this raises "
        "`AssertionError: Torch not compiled with CUDA enabled` (CPU build of torch; `RuntimeError: Cannot access "
        "accelerator device when none is available` for `.cuda(index)`); choose the device once, "
        '`torch.device("cuda" if torch.cuda.is_available() else "cpu")`, and move with `.to(device)`'
    )
    typed_constructor_message = (
        "hard-coded CUDA tensor type and no availability check in this file: without a GPU this raises `TypeError: "
        "type torch.cuda.FloatTensor not available. Torch not compiled with CUDA enabled.` (CPU build of torch); "
        'choose the device once, `torch.device("cuda" if torch.cuda.is_available() else "cpu")`, and build the '
        "tensor there: `torch.tensor(data, dtype=..., device=device)`"
    )
    storage_message = (
        "hard-coded CUDA device and no availability check in this file: a `map_location` that moves each storage "
        "with `.cuda()` fails without a GPU (`TypeError: '<' not supported between instances of 'NoneType' and 'int'` "
        'on a CPU build of torch); choose the device once, `torch.device("cuda" if torch.cuda.is_available() else '
        '"cpu")`, and load with `map_location=device`'
    )
    generator_message = (
        "hard-coded CUDA device and no availability check in this file: without a GPU this raises `RuntimeError: "
        "Cannot get CUDA generator without ATen_cuda library` (CPU build of torch); choose the device once, "
        '`torch.device("cuda" if torch.cuda.is_available() else "cpu")`, and build the generator there'
    )
    example = """
    import torch

    model = Net().cuda()  # expect: TL205:9
    batch = torch.zeros(8, 3, device="cuda")  # expect: TL205:34
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    batch = torch.zeros(8, 3, device=device)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.sites: List[cst.CSTNode] = []
        self.exempt = False
        # The GPU indices the file names (`"cuda:1"`, `.cuda(2)`): two or more is a multi-GPU program.
        self.indices: Set[int] = set()
        # A GPU named by a loop's counter (`for i in range(n): ... .cuda(i)`): one per pass, several GPUs.
        self.gpus_by_loop = False
        # Every module path the file imports (`pkg._C` for `from pkg import _C`), for its project's extensions.
        self.imports: List[str] = []
        # id of the value of a module-level `name = <device>` -> (the value, the names it is assigned to)
        self.module_values: Dict[int, Tuple[cst.BaseExpression, Tuple[str, ...]]] = {}
        # ids of the sites that are device values (a string, `torch.device(...)`), not moves
        self.device_values: Set[int] = set()
        # ids of the "cuda" strings given to `torch.Generator(device=...)`, which fails with its own error
        self.generator_devices: Set[int] = set()
        # `.cuda()` sites that move a storage: the body of a `map_location=lambda storage, location: ...`.
        self.storage_moves: Set[int] = set()
        # id of a call of a typed CUDA constructor (`torch.cuda.FloatTensor(...)`), which fails with its own error
        # naming the type -> that type
        self.typed_constructors: Dict[int, str] = {}
        # The calls of functions imported from project files, with where they are: one may decide for CUDA.
        self.project_calls: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]] = []
        # The method calls on objects (`TrainOptions().parse()`) in a file that imports from its project: a method of
        # a project class may decide for CUDA too.
        self.method_calls: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]] = []
        # `pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...)`: every test of the file is gated.
        self.module_gated = False
        # name -> its reads in the module, for the names module settings assign (`_replaced_before_any_read`).
        self.setting_reads: Optional[Dict[str, List[Tuple[cst.Name, Tuple[cst.CSTNode, ...]]]]] = None
        # The names the file passes as devices (`_names_passed_as_devices`), found on first need.
        self.passed_as_devices: Optional[FrozenSet[str]] = None
        # id of a decorator -> whether it gates on GPUs (`_gates_on_gpus`), asked once per decorator
        self.gates: Dict[int, bool] = {}

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name is None and type(node.func) is cst.Attribute and not _on_self(node.func) and project_import_names(self.ctx):
            self.method_calls.append((node, tuple(self.ctx.stack)))
        if name is not None:
            self._check_module_call(node, name)
            if syntax.head_name(node.func) in project_import_names(self.ctx):
                self.project_calls.append((node, tuple(self.ctx.stack)))
        elif semantics.method_name(node) == "cuda":
            read = conversion(node, self.ctx)
            if read is not None and computed_cuda_device(read):
                self._note_loop_index(read.device_node)
            elif read is not None and not self._moves_nothing(node):
                self._note_index(read.device_node)
                self._add(node)
                if moves_a_storage(node, self.ctx.stack):
                    self.storage_moves.add(id(node))
        elif semantics.method_name(node) == "to":
            device = semantics.positional(node, 0)
            if device is not None and is_cuda_string(device.value):
                self._add(device.value)
        for arg in node.args:
            if arg.keyword is None:
                continue
            if arg.keyword.value in DEVICE_KEYWORDS and is_cuda_string(arg.value):
                self._add(arg.value)
                if name == "torch.Generator":
                    self.generator_devices.add(id(arg.value))
            elif arg.keyword.value == "device_ids" and type(arg.value) in (cst.List, cst.Tuple):
                # `DataParallel(model, device_ids=[0, 1])` names the GPUs it runs on
                for element in arg.value.elements:
                    self._note_index(element.value)

    def _moves_nothing(self, call: cst.Call) -> bool:
        """`.cuda()` on a module with no parameters or buffers (`nn.LogSoftmax(dim=1).cuda()`, an unweighted
        `nn.CrossEntropyLoss().cuda()`): there is no tensor to move, and a CPU build of torch runs it without complaint
        (observed on torch 2.13; a loss given `weight=` raises)."""
        receiver = semantics.receiver(call)
        if receiver is None:
            return False
        origins = Values.of(self.ctx).origins(receiver)
        return bool(origins) and all(
            type(origin.node) is cst.Call and not origin.applied
            and ModuleClasses.of(origin.place.context).builds_stateless_module(origin.node, origin.place.stack)
            for origin in origins
        )

    def _check_module_call(self, node: cst.Call, name: str) -> None:
        if _decides_cuda(node, name):
            self.exempt = True
        elif name in EXTENSION_LOADERS:
            if _compiles_cuda(node):
                self.exempt = True
        elif name in CUDA_EXTENSION:
            self.exempt = True
        elif name in CUDA_TENSOR_TYPES:
            self.typed_constructors[id(node)] = name
            self._add(node)
        elif name == CUDA_DEVICE_CONTEXT:
            self._note_index(call_argument(node, 0, "device"))
        elif name == "torch.device":
            device = call_argument(node, 0, "type")
            if device is not None and is_cuda_string(device) and not _compared(self.ctx.stack):
                self._note_index(device)
                self._note_index(call_argument(node, 1, "index"))
                self.device_values.add(id(node))
                self._add(node)
        elif name == "torch.set_default_device":
            # The `device=` keyword form is found with the other device keywords.
            device = semantics.positional(node, 0)
            if device is not None and is_cuda_string(device.value):
                self._add(device.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        # Plain names, and in a module other files import, attributes of them (`config.device = "cuda"`, a config
        # module's settings object; a script or notebook hands such an object to its own code).
        names = tuple(
            dotted_name(target.target) if type(target.target) is cst.Name or self.ctx.file_kind is FileKind.LIBRARY else None
            for target in node.targets
        )
        # At module level: no function, class or lambda among the scopes around the statement.
        if all(names) and len(self.ctx.scope_nodes) == 1:
            # Visited before its value: a site found in the value can tell it is a module-level setting.
            self.module_values[id(node.value)] = (node.value, names)
        if len(self.ctx.scope_nodes) == 1 and any(dotted_name(target.target) == "pytestmark" for target in node.targets):
            marks = node.value.elements if type(node.value) in (cst.List, cst.Tuple) else [node.value]
            self.module_gated = self.module_gated or any(
                self._gates_on_gpus(getattr(mark, "value", mark), self.ctx.stack) for mark in marks
            )
        # `device = "cuda"`: the one place a script usually picks its device.
        if is_cuda_string(node.value) and any(self._names_a_device(target.target) for target in node.targets):
            self._add(node.value)

    def _names_a_device(self, target: cst.BaseExpression) -> bool:
        """The assigned `target` holds a device: its name says so (`names_device`), or the file passes the name
        as a device (`v2 = "cuda"`, then `.to(v2)`), whatever it is called."""
        name = semantics.terminal_name(target)
        # `device_type = "cuda"` feeds autocast, which only warns without a GPU.
        if not name or name.lower().endswith("_type"):
            return False
        if names_device(target, self.ctx):
            return True
        if type(target) is not cst.Name:
            return False
        if self.passed_as_devices is None:
            self.passed_as_devices = _names_passed_as_devices(self.ctx.module)
        return name in self.passed_as_devices

    def visit_Import(self, node: cst.Import) -> None:
        for path in _import_paths(node):
            self._imported(path)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        for path in _import_paths(node):
            self._imported(path)
        if isinstance(node.names, cst.ImportStar):
            # What it binds is imported here too (`te` from common.py's `import transformer_engine.pytorch as te`).
            for path in self.ctx.scopes.star_bound().values():
                self._imported(path)

    def _imported(self, path: str) -> None:
        self.imports.append(path)
        if any(path == library or path.startswith(library + ".") for library in CUDA_ONLY_LIBRARIES):
            # An import inside a function, a branch or a `try` that falls back keeps the file runnable without it.
            if _unconditional(self.ctx.stack):
                self.exempt = True

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        # `f"cuda:{i}"`: a GPU by index, however the string is used.
        parts = node.parts
        if len(parts) == 2 and type(parts[0]) is cst.FormattedStringText and parts[0].value == "cuda:" \
                and type(parts[1]) is cst.FormattedStringExpression:
            self._note_loop_index(parts[1].expression)

    def _note_loop_index(self, expr: Optional[cst.BaseExpression]) -> None:
        """Remember a GPU index that counts the passes of a loop around it (`.cuda(i)` in `for i in range(n):`)."""
        if type(expr) is cst.Name and expr.value in counters_around(self.ctx, self.ctx.stack):
            self.gpus_by_loop = True

    def _note_index(self, expr: Optional[cst.BaseExpression]) -> None:
        """Remember the GPU index a device names: a literal (`1`, `"cuda:1"`), or a loop's counter."""
        self._note_loop_index(expr)
        value = semantics.literal(expr, None)
        if isinstance(value, str) and CUDA_STRING.fullmatch(value) and ":" in value:
            value = int(value.partition(":")[2])
        if isinstance(value, int) and not isinstance(value, bool):
            self.indices.add(value)

    def _add(self, site: cst.CSTNode) -> None:
        if isinstance(site, (cst.SimpleString, cst.ConcatenatedString)):
            self._note_index(site)
            self.device_values.add(id(site))
        if not (
            implements_method(self.ctx, "cuda") or self._chosen_elsewhere() or self._gated()
            or _distributed_only(self.ctx.stack)
        ):
            self.sites.append(site)

    def _gated(self) -> bool:
        """The innermost point is in a test function or class whose decorators skip it without GPUs."""
        stack = self.ctx.stack
        for index, node in enumerate(stack):
            if type(node) in (cst.FunctionDef, cst.ClassDef):
                for decorator in node.decorators:
                    if id(decorator) not in self.gates:
                        self.gates[id(decorator)] = self._gates_on_gpus(decorator.decorator, stack[:index])
                    if self.gates[id(decorator)]:
                        return True
        return False

    def _gates_on_gpus(self, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
        """A decorator or mark that skips without GPUs: named for them (`skip_if_lt_x_gpu(2)`, `requires_cuda`,
        `pytest.mark.gpu`), a skip whose condition names them (`unittest.skipIf(not torch.cuda.is_available(), ...)`,
        `pytest.mark.skipif(not HAS_GPU, ...)`), or a function of the project whose body holds such a gate (a test
        suite's `def require_gpu(f): return pytest.mark.skipif(...)(f)`)."""
        if _names_a_gpu_gate(expr):
            return True
        func = expr.func if type(expr) is cst.Call else expr
        if type(func) not in (cst.Name, cst.Attribute):
            return False
        return any(
            type(origin.node) is cst.FunctionDef and _holds_gpu_gate(origin.node)
            for origin in Values.of(self.ctx).origins(func, [*stack, expr])
        )

    def _chosen_elsewhere(self) -> bool:
        """A parameter default, or a branch taken only when the code asks for CUDA (`if args.cuda:`)."""
        stack = self.ctx.stack
        for parent, child in zip(stack, stack[1:]):
            if isinstance(parent, cst.Param) and child is parent.default:
                return True
        return in_a_cuda_branch(stack, ctx=self.ctx)

    def finish(self) -> None:
        # Written for CUDA machines only: an availability check or a CUDA-only API or library, two or more GPUs
        # by index (a model split over devices), or a CUDA extension of its own project.
        if (
            self.exempt or not self.sites or len(self.indices) > 1 or self.gpus_by_loop
            or self._imports_project_cuda_extension()
            or self._imports_project_cuda_build()
            or self._calls_project_cuda_setup()
            or self._imports_availability_check() or self.module_gated
        ):
            return
        # Where the program means to run: not reported in a helper reached only from CUDA-only files of its project.
        intent = project_intent(self.ctx.filename, self.ctx.config)
        sites = Sites(intent, self.ctx, intent.evidence_in(self.ctx.text, self.ctx.filename))
        if not sites.whole.report:
            return
        read = _names_read(self.ctx.module) if any(map(self._is_module_setting, self.sites)) else frozenset()
        for site in self.sites:
            verdict = sites.verdict(site)
            if not verdict.report:
                continue
            cited = _cited(verdict.evidence, intent.root, sites.own)
            # `device = "cuda"` at module level that nothing in the file reads: a setting another module imports
            # (a config file), like an `add_argument(..., default="cuda")`; its reader takes a variable. Or one that
            # no read sees, set again first (a notebook's `device = torch.device("cpu")` cells later).
            if self._is_module_setting(site) and (
                read.isdisjoint(self.module_values[id(site)][1]) or self._replaced_before_any_read(site)
            ):
                continue
            self.report(site, self._message_for(site) + cited)

    def _message_for(self, site: cst.CSTNode) -> str:
        if id(site) in self.generator_devices:
            return self.generator_message
        if id(site) in self.storage_moves:
            return self.storage_message
        if id(site) in self.typed_constructors:
            return self.typed_constructor_message.replace("torch.cuda.FloatTensor", self.typed_constructors[id(site)], 1)
        return self.message

    def _calls_project_cuda_setup(self) -> bool:
        """The file calls a function of another project file that checks for CUDA or sets the program up for it, or
        such a method of a project class, its own or inherited, on an instance of the class (`TrainOptions().parse()`,
        whose base `BaseOptions.parse` calls `torch.cuda.set_device`)."""
        return any(
            imported_function_showing(self.ctx, call.func, stack, DECIDES_CUDA) for call, stack in self.project_calls
        ) or any(self._project_method_decides_cuda(call, stack) for call, stack in self.method_calls)

    def _project_method_decides_cuda(self, call: cst.Call, stack: Tuple[cst.CSTNode, ...]) -> bool:
        built = Values.of(self.ctx).instance_class(call.func.value, stack)
        method = inherited_method(built, call.func.attr.value) if built is not None else None
        # A method of the file itself: its `set_device` is the file's own, seen where it is.
        return method is not None and method.place.context is not self.ctx and bool(function_facts(method, DECIDES_CUDA))

    def _imports_availability_check(self) -> bool:
        """The file imports a module-level name of its project whose value checks for CUDA (a test suite's
        `_MARK_REQUIRE_GPU = {"condition": not torch.cuda.is_available(), ...}` in `tests/__init__.py`, used as
        `pytest.mark.skipif(**_MARK_REQUIRE_GPU)`), as if it checked itself."""
        for path in self.imports:
            located = PROJECT.locate_name(self.ctx.filename, path)
            if located is None:
                continue
            checking = SUMMARIES.section(located[0], self.ctx.config, "names-checking-availability", _names_checking_availability)
            if checking is not None and located[1] in checking:
                return True
        return False

    def _is_module_setting(self, site: cst.CSTNode) -> bool:
        """`site` is a device string or `torch.device(...)` (building one touches no GPU, unlike `.cuda()`) that
        is the whole value of a module-level assignment to plain names."""
        assigned = self.module_values.get(id(site))
        return assigned is not None and assigned[0] is site and id(site) in self.device_values

    def _replaced_before_any_read(self, site: cst.CSTNode) -> bool:
        """No read of the names a module setting assigns sees it: at each read in the module's own code, the
        bindings that reach it (flow) are others (`device = torch.device("cpu")` set after it, or a function's
        parameter); a read in a function may run at any time, so it sees every module-level binding."""
        names = self.module_values[id(site)][1]
        if any("." in name for name in names):
            return False
        if self.setting_reads is None:
            # Every module setting's names read in one walk, not one walk per setting (a file of many settings).
            every_name = frozenset(name for _, assigned in self.module_values.values() for name in assigned)
            self.setting_reads = {}
            for name, stack in _reads_of(self.ctx.module, every_name):
                self.setting_reads.setdefault(name.value, []).append((name, stack))
        values = Values.of(self.ctx)
        for name, stack in (read for each in names for read in self.setting_reads.get(each, ())):
            found = values.bindings(name, values.place(stack))
            if found is not None and any(binding.value is site for binding in found[1]):
                return False
        return True

    def _imports_project_cuda_extension(self) -> bool:
        """The file imports a module its project builds as a `CUDAExtension` (the `setup.py` next to it, or at the
        top of its package): a test or benchmark of custom CUDA kernels."""
        if not self.imports:
            return False
        found = PROJECT.resolve(self.ctx.filename, "setup", self.ctx.config)
        if found is None or found[1]:
            return False
        setup = found[0].context
        finder = _CudaExtensions(setup)
        walk_visitor(setup.module, finder)
        return any(names_module(built, path) for built in finder.names for path in self.imports)

    def _imports_project_cuda_build(self) -> bool:
        """The file imports a project module that compiles CUDA code when it is imported (`cpp_extension.load(...)`
        of `.cu` sources at module level, as StyleGAN2's `op` package does), itself or through the project modules
        it imports in turn: without CUDA the import fails first (`OSError: CUDA_HOME environment variable is not
        set`). Followed `_MAX_BUILD_DEPTH` imports deep, at most `_MAX_BUILD_MODULES` modules. A module of a package
        is imported after its package's `__init__.py`, whose imports count as its own (face-parsing's
        `modules/misc.py`, whose `modules/__init__.py` imports the sibling that builds `inplace_abn`)."""
        # A script or notebook runs without its folder's `__init__.py`.
        inits = PROJECT.package_inits(self.ctx.filename)[:_MAX_BUILD_DEPTH] if self.ctx.file_kind is FileKind.LIBRARY else []
        pending: List[Tuple[Optional[str], str, int]] = [(None, init, 0) for init in inits]
        pending += [(self.ctx.filename, path, 0) for path in self.imports]
        seen: Set[str] = set()
        while pending and len(seen) < _MAX_BUILD_MODULES:
            importer, path, depth = pending.pop()
            found = self._what_importing_does(importer, path)
            if found is None and importer is not None and not path.startswith("."):
                # Absolute imports resolve against where the program starts, the linted file's folder (`sys.path`),
                # also for a module imported from it: `gans/models/StyleGAN2/model.py` importing `gans.models...`.
                found = self._what_importing_does(self.ctx.filename, path)
            if found is None or found[0] in seen:
                continue
            module, (compiles_cuda, imports) = found
            seen.add(module)
            if compiles_cuda:
                return True
            if depth + 1 < _MAX_BUILD_DEPTH:
                pending.extend((module, imported, depth + 1) for imported in imports)
        return False

    def _what_importing_does(self, importer: Optional[str], path: str) -> Optional[Tuple[str, Tuple[bool, Tuple[str, ...]]]]:
        """The project file the import path names (`importer` None: `path` is the file) and what importing it does
        (`_import_time_build`), read from its summary when one is stored."""
        if importer is None:
            module = path
        else:
            located = PROJECT.locate(importer, path)
            if located is None:
                return None
            module = located[0]
        build = SUMMARIES.section(module, self.ctx.config, "import-time-build", _import_time_build)
        return (module, build) if build is not None else None


def _compared(stack) -> bool:
    """The node at the end of `stack` is an operand of a comparison, alone or in a literal tuple, list or set there
    (`t.device != torch.device("cuda")`, `x.device in (torch.device("cuda"),)`): the device is built and compared,
    which needs no GPU (observed on torch 2.13's CPU build), and placed nowhere."""
    for parent in reversed(stack[:-1]):
        if type(parent) in (cst.Comparison, cst.ComparisonTarget):
            return True
        if type(parent) not in (cst.Element, cst.Tuple, cst.List, cst.Set):
            return False
    return False


def _on_self(func: cst.Attribute) -> bool:
    """`self.name(...)`: a method of the class the code is in, whose own code the file shows."""
    return type(func.value) is cst.Name and func.value.value in ("self", "cls")


def _names_a_gpu_gate(expr: cst.BaseExpression) -> bool:
    """`skip_if_lt_x_gpu(2)`, `@requires_cuda`, `pytest.mark.gpu`, or a skip (`skipIf`, `skipUnless`, `skipif`) whose
    arguments name CUDA or GPUs (`not torch.cuda.is_available()`, `HAS_GPU`, `reason="needs a GPU"`)."""
    func = expr.func if type(expr) is cst.Call else expr
    name = dotted_name(func) if type(func) in (cst.Name, cst.Attribute) else None
    if name is None:
        return False
    last = name.rpartition(".")[2]
    if _GPU_WORD.search(last) and _GATE_WORD.search(name):
        return True
    if last.lower() not in _SKIPS or type(expr) is not cst.Call:
        return False
    mentions = _Mentions()
    for arg in expr.args:
        walk_visitor(arg.value, mentions)
    return mentions.found


def _holds_gpu_gate(function: cst.FunctionDef) -> bool:
    finder = _GpuGates()
    walk_visitor(function.body, finder)
    return finder.found


class _GpuGates(cst.CSTVisitor):
    """A GPU gate (`_names_a_gpu_gate`) anywhere in a function: a call, or a decorator named without one."""

    def __init__(self):
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        self.found = self.found or _names_a_gpu_gate(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self.found = self.found or _names_a_gpu_gate(node.decorator)


class _Mentions(cst.CSTVisitor):
    """A name, attribute or string mentioning CUDA or GPUs."""

    def __init__(self):
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or bool(_GPU_WORD.search(node.value))

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.found = self.found or bool(_GPU_WORD.search(node.value))


def _distributed_only(stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost point of `stack` runs only when the program is one of several processes: in the branch of
    `if world_size > 1:` or `if dist.is_initialized():`, the `else` of their opposites, or after
    `if world_size == 1: return` / `if not dist.is_initialized(): return` in the same block. A distributed run is a
    launcher's, and its `.cuda()` a GPU's."""
    for parent, child in zip(stack, stack[1:]):
        if type(parent) is cst.If and child is not parent.test:
            distributed = _says_distributed(parent.test)
            if distributed is not None and distributed == (child is parent.body):
                return True
        body = getattr(parent, "body", None)
        if type(parent) in (cst.IndentedBlock, cst.Module) and isinstance(body, (list, tuple)):
            for statement in body:
                if statement is child:
                    break
                if type(statement) is cst.If and statement.orelse is None and _says_distributed(statement.test) is False \
                        and _leaves(statement.body):
                    return True
    return False


def _says_distributed(test: cst.BaseExpression) -> Optional[bool]:
    """True for a condition that holds in a run of several processes (`world_size > 1`, `dist.is_initialized()`,
    `args.distributed`), False for one that holds in a single process (`world_size == 1`, `not
    dist.is_initialized()`), None for any other."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _says_distributed(test.expression)
        return None if inner is None else not inner
    if type(test) is cst.BooleanOperation:
        sides = (_says_distributed(test.left), _says_distributed(test.right))
        # `a and b` holds in a distributed run when one side does; `a or b` in a single process when one side does.
        wanted = True if type(test.operator) is cst.And else False
        return wanted if wanted in sides else None
    if type(test) is cst.Call:
        name = dotted_name(test.func) or ""
        return True if name.rpartition(".")[2] == "is_initialized" and "dist" in name else None
    if type(test) in (cst.Name, cst.Attribute):
        return True if _DISTRIBUTED_FLAG.fullmatch(semantics.terminal_name(test) or "") else None
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        left, target = test.left, test.comparisons[0]
        counted = dotted_name(left.func) if type(left) is cst.Call else dotted_name(left)
        bound = semantics.literal(target.comparator, None)
        if counted is None or not _WORLD_SIZE.search(counted.rpartition(".")[2]) or type(bound) is not int:
            return None
        operator = type(target.operator)
        if (operator is cst.Equal and bound == 1) or (operator is cst.LessThanEqual and bound == 1) or (operator is cst.LessThan and bound == 2):
            return False
        if (operator in (cst.NotEqual, cst.GreaterThan) and bound == 1) or (operator is cst.GreaterThanEqual and bound == 2):
            return True
    return None


def _leaves(block: cst.BaseSuite) -> bool:
    """The block ends by leaving its function (`return`, `raise`)."""
    statements = block.body if type(block) is cst.IndentedBlock else [block]
    last = statements[-1] if statements else None
    if type(last) is cst.SimpleStatementLine:
        last = last.body[-1] if last.body else None
    if type(block) is cst.SimpleStatementSuite:
        last = block.body[-1] if block.body else None
    return type(last) in (cst.Return, cst.Raise)


def _names_checking_availability(ctx) -> Tuple[str, ...]:
    """The names a module's top-level assignments bind to a value that calls an availability check
    (`HAS_GPU = torch.cuda.is_available()`, `REQUIRES_GPU = {"condition": not torch.cuda.device_count(), ...}`)."""
    names: List[str] = []
    for small in _top_level_statements(ctx.module):
        if type(small) is cst.Assign and any(
            ctx.qualified_name(call.func, [ctx.module]) in AVAILABILITY_CHECKS for call in _calls_in(small.value)
        ):
            names.extend(target.target.value for target in small.targets if type(target.target) is cst.Name)
    return tuple(names)


def _import_time_build(ctx) -> Tuple[bool, Tuple[str, ...]]:
    """What importing a module does, for `_imports_project_cuda_build`: whether its module-level code compiles a CUDA
    extension, and the modules its module-level statements import."""
    compiles_cuda = False
    imports: List[str] = []
    for small in _top_level_statements(ctx.module):
        if type(small) in (cst.Import, cst.ImportFrom):
            imports.extend(_import_paths(small))
        else:
            compiles_cuda = compiles_cuda or any(
                ctx.qualified_name(call.func, [ctx.module]) in EXTENSION_LOADERS and _compiles_cuda(call)
                for call in _calls_in(small)
            )
    return compiles_cuda, tuple(imports)


def _top_level_statements(module: cst.Module) -> Iterator[cst.BaseSmallStatement]:
    """The simple statements at the top level of a module (`x = f()`, `import y`): what importing it runs first."""
    for statement in module.body:
        if type(statement) is cst.SimpleStatementLine:
            yield from statement.body


def _calls_in(node: cst.CSTNode) -> List[cst.Call]:
    finder = _Calls()
    walk_visitor(node, finder)
    return finder.calls


class _Calls(cst.CSTVisitor):
    def __init__(self):
        self.calls: List[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _import_paths(node) -> List[str]:
    """The module paths an import statement names: `pkg.mod` for `import pkg.mod`, `pkg.mod.name` for `from pkg.mod
    import name`, `.name` for `from . import name`, `pkg` for `from pkg import *`."""
    if type(node) is cst.Import:
        return [path for path in (dotted_name(alias.name) for alias in node.names) if path]
    module = "." * len(node.relative) + ((dotted_name(node.module) or "") if node.module is not None else "")
    if isinstance(node.names, cst.ImportStar):
        return [module] if module else []
    paths = []
    for alias in node.names:
        name = dotted_name(alias.name)
        if name:
            paths.append(module + name if module.endswith(".") or not module else f"{module}.{name}")
    return paths


def _names_passed_as_devices(module: cst.Module) -> FrozenSet[str]:
    """The plain names the module passes where a device goes, as `visit_Call` finds a device string: `.to(name)`,
    `device=name`, `map_location=name`, in any scope."""
    finder = _PassedAsDevices()
    walk_visitor(module, finder)
    return frozenset(finder.names)


class _PassedAsDevices(cst.CSTVisitor):
    def __init__(self):
        self.names: Set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        moved = semantics.positional(node, 0) if semantics.method_name(node) == "to" else None
        given = [moved.value] if moved is not None else []
        given += [arg.value for arg in node.args if arg.keyword is not None and arg.keyword.value in DEVICE_KEYWORDS]
        self.names.update(value.value for value in given if type(value) is cst.Name)


def _unconditional(stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost node of `stack` runs whenever the module is imported: not in a function, class, branch or
    loop, and in a `try` only when every handler raises again (`except ImportError: raise ImportError(...)`)."""
    for parent, child in zip(stack, stack[1:]):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.If, cst.For, cst.While)):
            return False
        if isinstance(parent, (cst.Try, cst.TryStar)):
            if child is not parent.body or not all(_raises(handler) for handler in parent.handlers):
                return False
    return True


def _raises(handler: cst.CSTNode) -> bool:
    finder = _Raise()
    walk_visitor(handler.body, finder)
    return finder.found


class _Raise(cst.CSTVisitor):
    def __init__(self):
        self.found = False

    def visit_Raise(self, node: cst.Raise) -> None:
        self.found = True


def _compiles_cuda(call: cst.Call) -> bool:
    """`cpp_extension.load(...)`/`load_inline(...)` given CUDA code: `.cu` sources, `cuda_sources=`, `with_cuda=True`."""
    for arg in call.args:
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword == "cuda_sources" and semantics.literal(arg.value, "") is not None:
            return True
        if keyword == "with_cuda" and semantics.literal(arg.value, None) is True:
            return True
    finder = _Strings()
    walk_visitor(call, finder)
    return any(_CUDA_SOURCE.fullmatch(value) for value in finder.values)


class _Strings(cst.CSTVisitor):
    def __init__(self):
        self.values: List[str] = []

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = semantics.literal(node, None)
        if isinstance(value, str):
            self.values.append(value)


class _CudaExtensions(cst.CSTVisitor):
    """The module names of the `CUDAExtension(...)`s a setup script builds."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.names: List[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func, [self.ctx.module]) in CUDA_EXTENSION:
            name = semantics.literal(call_argument(node, 0, "name"), None)
            if isinstance(name, str) and name:
                self.names.append(name)


# Where a `Name` child binds or names something rather than reads a value: (parent type, its field).
_NOT_READ = frozenset({
    (cst.AssignTarget, "target"), (cst.AnnAssign, "target"), (cst.For, "target"), (cst.CompFor, "target"),
    (cst.AsName, "name"), (cst.NamedExpr, "target"), (cst.Attribute, "attr"), (cst.Arg, "keyword"),
    (cst.Param, "name"), (cst.FunctionDef, "name"), (cst.ClassDef, "name"), (cst.NameItem, "name"),
})


def _reads_of(module: cst.Module, names: FrozenSet[str]) -> List[Tuple[cst.Name, Tuple[cst.CSTNode, ...]]]:
    """Each `Name` of `names` the module reads as a value (an augmented assignment reads it too), with the nodes
    around it, outermost first."""
    stack: List[cst.CSTNode] = []
    found = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Name and node.value in names and stack and not any(
            type(stack[-1]) is parent and getattr(stack[-1], field) is node for parent, field in _NOT_READ
        ):
            found.append((node, tuple(stack) + (node,)))
        stack.append(node)
        return type(node) not in (cst.Import, cst.ImportFrom)

    walk(module, on_visit, lambda node: stack.pop())
    return found


def _names_read(module: cst.Module) -> FrozenSet[str]:
    reader = _NamesRead()
    walk_visitor(module, reader)
    return frozenset(reader.names)


class _NamesRead(cst.CSTVisitor):
    """The names a module reads anywhere (not those it only assigns, defines, imports, or writes as keywords or
    attribute names), with the dotted names of the attributes it reads (`config.device`): a name used as a value in
    any scope counts, shadowed or not."""

    def __init__(self):
        self.names: Set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        dotted = dotted_name(node)
        if dotted is not None:  # `config.device` read: the setting `config.device = "cuda"` is used here
            self.names.add(dotted)
        walk_visitor(node.value, self)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        if type(node.target) is cst.Attribute:  # `config.device = ...` reads `config`, not `config.device`
            walk_visitor(node.target.value, self)
        return type(node.target) not in (cst.Name, cst.Attribute)

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk_visitor(node.value, self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        for part in (node.annotation, node.default):
            if part is not None:
                walk_visitor(part, self)
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False
