"""Project intent for TL205 (torchlint/analysis/intent.py): where a program means to run, read once per project.

The shapes it decides are fixtures (fixtures/projects/cuda_only_program_helper, cpu_path_reaches_helper,
gpu_gate_helper, helper_imported_only_by_cuda_programs, helper_imported_by_a_script, helper_module_imported_whole);
these tests pin what the fixtures cannot: the evidence each pattern reads, the CI evidence, the project root, the
caps, the names each importer imports, the message's citation, that the scan is made once per process and kept in the
store (in its current shape), and what a cached result depends on.
"""

from pathlib import Path

import pytest

from conftest import FIXTURES
from torchlint.analysis import intent, summaries
from torchlint.config import build
from torchlint.engine.runner import lint_file
from torchlint.rules.device.cuda_without_fallback import CudaWithoutFallback


EVIDENCE_CASES = [
    ('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n', "cpu", "a device fallback"),
    ('device = "cpu" if not torch.cuda.is_available() else "cuda"\n', "cpu", "a device fallback"),
    ('dist.init_process_group(backend="nccl")\n', "cuda", "an NCCL process group"),
    ("assert torch.cuda.is_available()\n", "cuda", "an assertion that CUDA is there"),
    ("torch.cuda.set_device(rank)\n", "cuda", "`torch.cuda.set_device`"),
    ("RANK = dist.get_rank()\n", "cuda", "a process rank read at import"),
    ('ext = CUDAExtension("ops", ["ops.cpp"])\n', "cuda", "a CUDA extension"),
    ("from apex import amp\n", "cuda", "a CUDA-only library"),
    ('parser.add_argument("--device", default="cpu")\n', "cpu", 'a `--device` default of "cpu"'),
    ('def run(model, device="cpu"):\n', "cpu", 'a `device` parameter defaulting to "cpu"'),
    ('    device: str = "cpu",\n', "cpu", 'a `device` parameter defaulting to "cpu"'),
    ('device = "cpu"  # no GPU here\n', "cpu", 'a `device = "cpu"` setting'),
    # An explicit fallback outweighs CUDA-only design; CUDA-only design outweighs a parameter defaulting to the CPU.
    ('dist.init_process_group("nccl")\ndevice = "cuda" if torch.cuda.is_available() else "cpu"\n', "cpu", "a device fallback"),
    ('def to(x, device="cpu"):\n    pass\ndist.init_process_group("nccl")\n', "cuda", "an NCCL process group"),
]


@pytest.mark.parametrize("text, kind, what", EVIDENCE_CASES)
def test_evidence_of_a_file(text, kind, what):
    found = intent.evidence_in(text, "train.py")
    assert (found.kind, found.what) == (kind, what)


EXTENSIONS = frozenset({"build_adjacency_matrix", "pkg._C"})


@pytest.mark.parametrize("text, what", [
    ("import build_adjacency_matrix\n", intent.CUDA_EXTENSION_IMPORT),
    ("from pkg._C import nms\n", intent.CUDA_EXTENSION_IMPORT),
    ("from . import _C\n", intent.CUDA_EXTENSION_IMPORT),
    # CUDA-only design outweighs a parameter defaulting to the CPU; a device fallback outweighs it.
    ('def run(x, device="cpu"):\n    pass\nimport build_adjacency_matrix\n', intent.CUDA_EXTENSION_IMPORT),
    ('import build_adjacency_matrix\ndevice = "cuda" if torch.cuda.is_available() else "cpu"\n', "a device fallback"),
    # Imported in a function or a `try`: the file may run without it.
    ("def rerank():\n    import build_adjacency_matrix\n", None),
    ("try:\n    import build_adjacency_matrix\nexcept ImportError:\n    pass\n", None),
    ("import build_adjacency\nimport pkg\n", None),  # another module, the package itself
])
def test_evidence_of_an_import_of_a_cuda_extension_of_the_project(text, what):
    found = intent.evidence_in(text, "/nowhere/train.py", EXTENSIONS)
    assert (found.what if found is not None else None) == what


@pytest.mark.parametrize("text", [
    "x = torch.ones(2, device='cpu')\n",  # a CPU tensor in any program
    "    device='cpu',\n",  # a keyword argument of a call spread over lines
    "world = dist.get_world_size()  # in a function\n    rank = dist.get_rank()\n",
    "def load(path):\n    return torch.load(path)\n",
    'state = torch.load(path, map_location="cpu")\n',  # CUDA-only programs load on the CPU to spare GPU memory
])
def test_no_evidence(text):
    assert intent.evidence_in(text, "train.py") is None


def write(folder: Path, files: dict) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


CI = "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n      - run: pip install torch\n      - run: pytest tests\n"


def test_ci_running_pytest_on_a_hosted_runner_is_a_cpu_path_for_the_tests(tmp_path):
    write(tmp_path, {".github/workflows/ci.yml": CI, "tests/test_ops.py": "import torch\n", "lib/ops.py": "import torch\n"})
    found = intent._scan(str(tmp_path))
    verdict = found.decide(str(tmp_path / "tests/test_ops.py"), None)
    assert verdict.report and verdict.evidence.what == "CI running the tests without a GPU"
    assert verdict.evidence.describe(str(tmp_path)) == (
        "CI running the tests without a GPU, `runs-on: ubuntu-latest` in .github/workflows/ci.yml:4"
    )
    assert found.decide(str(tmp_path / "lib/ops.py"), None) == intent.Verdict(True, None)


@pytest.mark.parametrize("workflow", [
    CI.replace("pytest tests", "python -m build"),  # no tests run
    CI.replace("ubuntu-latest", "[self-hosted, gpu]"),  # a runner of the project's own, with a GPU
])
def test_ci_without_tests_on_cpus_says_nothing(tmp_path, workflow):
    write(tmp_path, {".github/workflows/ci.yml": workflow, "tests/test_ops.py": "import torch\n"})
    assert intent._scan(str(tmp_path)).ci is None


def test_a_file_is_judged_by_every_route_that_reaches_it(tmp_path):
    write(tmp_path, {
        "train.py": 'import torch.distributed as dist\nimport engine\ndist.init_process_group("nccl")\n',
        "launch.py": "import train\n",
        "engine.py": "from steps import step\n",
        "steps.py": "import torch\n",
        "demo.py": "import steps\n",
        "alone.py": "import torch\n",
    })
    found = intent._scan(str(tmp_path))
    # engine.py: its one importer is CUDA-only.
    assert found.decide(str(tmp_path / "engine.py"), None).report is False
    # steps.py: reached through engine.py from train.py, but also from demo.py, which says nothing.
    assert found.decide(str(tmp_path / "steps.py"), None) == intent.Verdict(True, None)
    assert found.decide(str(tmp_path / "alone.py"), None) == intent.Verdict(True, None)
    (tmp_path / "demo.py").unlink()
    assert intent._scan(str(tmp_path)).decide(str(tmp_path / "steps.py"), None).report is False


def test_each_importer_is_kept_with_the_names_it_imports(tmp_path):
    """A whole-module import or a star import may reach anything in the module: it names none in particular (None)."""
    write(tmp_path, {
        "pkg/__init__.py": "", "pkg/core.py": "",
        "by_name.py": "from pkg.core import prepare, label as make_label\nfrom pkg.core import (\n    Runner,\n)\n",
        "whole.py": "from pkg.core import label\nimport pkg.core\n",
        "from_package.py": "from pkg import core\n",
        "star.py": "from pkg.core import *\n",
        "pkg/sibling.py": "from .core import prepare\n",
    })
    found = intent._scan(str(tmp_path))
    assert found.importers[str(tmp_path / "pkg/core.py")] == {
        str(tmp_path / "by_name.py"): ("Runner", "label", "prepare"),
        str(tmp_path / "from_package.py"): None,
        str(tmp_path / "pkg/sibling.py"): ("prepare",),
        str(tmp_path / "star.py"): None,
        str(tmp_path / "whole.py"): None,
    }


def test_a_scan_stored_in_the_old_shape_is_made_again():
    old = ({}, {"/p/core.py": ["/p/train.py"]}, None, {})  # importers as a list per file, before the names were kept
    assert not intent._well_formed(old)
    importers = {"/p/core.py": {"/p/train.py": ("prepare",), "/p/demo.py": None}}
    assert not intent._well_formed(({}, importers, None, {}))  # before the project's CUDA extensions were kept
    assert intent._well_formed(({}, importers, None, {}, {"build_adjacency_matrix": "/p/extension/setup.py"}))


def test_a_helper_is_relinted_when_an_importer_comes_to_import_it(tmp_path, monkeypatch):
    """Not reported because the test imports another function; the test's digest is kept with the cached result, so
    a test that comes to import the helper reports it in the next run (a fresh process: the scan is made again)."""
    from torchlint.cli import main

    write(tmp_path, {
        "pyproject.toml": "", "pkg/__init__.py": "",
        "pkg/core.py": "def label():\n    return 0\n\n\ndef prepare(x):\n    return x.cuda()\n",
        "train.py": "import torch\nfrom pkg.core import prepare\n\nassert torch.cuda.is_available()\n",
        "tests/__init__.py": "", "tests/test_core.py": "from pkg.core import label\n",
    })
    monkeypatch.chdir(tmp_path)
    arguments = ["check", "--preview", "--select", "TL205", "--output-format", "concise", "pkg/core.py"]
    monkeypatch.setattr(intent, "_INTENTS", {})
    assert main(arguments) == 0
    (tmp_path / "tests/test_core.py").write_text("from pkg.core import label, prepare\n")
    monkeypatch.setattr(intent, "_INTENTS", {})
    assert main(arguments) == 1


def test_the_project_root_is_never_a_folder_the_file_is_hidden_from(tmp_path):
    write(tmp_path, {"pyproject.toml": "", "benchmarks/.cache/corpus/repo/pkg/mod.py": "", "src/pkg/mod.py": ""})
    assert intent.project_root(str(tmp_path / "src/pkg/mod.py"), "/") == str(tmp_path)
    assert intent.project_root(str(tmp_path / "benchmarks/.cache/corpus/repo/pkg/mod.py"), "/") == str(
        tmp_path / "benchmarks/.cache/corpus"
    )


def test_the_scan_is_capped(tmp_path, monkeypatch):
    write(tmp_path, {f"m{index}.py": "import torch\n" for index in range(5)})
    write(tmp_path, {".venv/lib/site.py": "", "node_modules/x.py": "", "big.py": "#" * 20})
    monkeypatch.setattr(intent, "_MAX_BYTES", 19)
    assert [Path(path).name for path, _ in intent._listing(str(tmp_path))[0]] == [f"m{index}.py" for index in range(5)]
    monkeypatch.setattr(intent, "_MAX_FILES", 3)
    assert len(intent._listing(str(tmp_path))[0]) == 3


def test_the_scan_is_made_once_per_process_and_project(monkeypatch):
    scans = []
    scan = intent._scan
    monkeypatch.setattr(intent, "_INTENTS", {})
    monkeypatch.setattr(intent, "_scan", lambda root: scans.append(root) or scan(root))
    config = build({}, root=FIXTURES, path=None, where="test", torch_requirement_from=FIXTURES)
    folder = FIXTURES / "projects" / "cuda_only_program_helper"
    for name in ("engine.py", "metrics.py", "demo.py"):
        intent.project_intent(str(folder / name), config)
    assert len(scans) == 1


def test_a_fresh_process_reads_the_scan_from_the_store_not_the_files(tmp_path, monkeypatch):
    write(tmp_path, {"train.py": 'import engine\ndist.init_process_group("nccl")\n', "engine.py": "import torch\n"})
    config = build({}, root=tmp_path, path=None, where="test", torch_requirement_from=tmp_path)
    monkeypatch.setattr(summaries, "SUMMARIES", summaries.Summaries())
    monkeypatch.setattr(intent, "SUMMARIES", summaries.SUMMARIES)
    summaries.SUMMARIES.use_store(config)
    first = intent._scan(str(tmp_path))

    def unreadable(path):
        raise OSError(path)

    monkeypatch.setattr(intent.sources, "read_bytes", unreadable)
    again = intent._scan(str(tmp_path))
    assert again.evidence == first.evidence and again.importers == first.importers
    assert again.decide(str(tmp_path / "engine.py"), None).report is False
    # A file added changes the listing: the scan is made again (and here reads nothing).
    write(tmp_path, {"other.py": ""})
    assert intent._scan(str(tmp_path)).evidence == {}


def test_the_message_cites_the_evidence_that_decided():
    path = FIXTURES / "projects" / "cpu_path_reaches_helper" / "model_utils.py"
    config = build({"select": ["TL205"], "preview": True}, root=FIXTURES, path=None, where="test", torch_requirement_from=FIXTURES)
    [finding] = lint_file(str(path), config).findings
    assert finding.message.endswith(
        '; this project also runs on the CPU: a `--device` default of "cpu", `add_argument("--device", default="cpu"` '
        "in projects/cpu_path_reaches_helper/evaluate.py:7"  # relative to the project root: the config's, here
    )


def test_a_fallback_only_in_the_files_text_is_cited_as_not_read_as_code(tmp_path):
    """The file's own text shows a fallback its code does not (here in a comment): the message says so, instead of
    "no availability check in this file" followed by "this project also runs on the CPU: ... in this file"."""
    write(tmp_path, {
        "pyproject.toml": "",
        "train.py": '# device = "cuda" if torch.cuda.is_available() else "cpu"\nimport torch\nmodel = torch.nn.Linear(2, 2).cuda()\n',
    })
    config = build({"select": ["TL205"], "preview": True}, root=tmp_path, path=None, where="test", torch_requirement_from=tmp_path)
    [finding] = lint_file(str(tmp_path / "train.py"), config).findings
    assert "this project also runs on the CPU" not in finding.message
    assert finding.message.endswith(
        "; this file's text shows a device fallback at line 1, `is_available() else \"cpu\"`, but not as a call of "
        "torch's (a comment, a string, or a `torch` not seen imported)"
    )


def test_each_site_cites_the_evidence_of_what_imports_its_function(tmp_path):
    """The file's first CPU path is cited only where the function around the site is imported by it."""
    write(tmp_path, {
        "pyproject.toml": "",
        "ops.py": "def evaluate(model):\n    return model.cuda()\n\n\ndef show(x):\n    return x.cuda()\n",
        "cpu_eval.py": 'from ops import evaluate\ndevice = "cpu"\n',
        "demo.py": "from ops import show\n",
    })
    config = build({"select": ["TL205"], "preview": True}, root=tmp_path, path=None, where="test", torch_requirement_from=tmp_path)
    evaluate, show = lint_file(str(tmp_path / "ops.py"), config).findings
    assert evaluate.message.endswith(
        'this project also runs on the CPU: a `device = "cpu"` setting, `device = "cpu"` in cpu_eval.py:2'
    )
    assert show.message == CudaWithoutFallback.message  # demo.py says nothing of where it runs


def _texts_with_evidence():
    """Every fixture's text, and lines of each kind of evidence in awkward places: the first line, the last line
    without a break, CRLF endings, a match after a non-matching line holding the same need."""
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in sorted(FIXTURES.rglob("*.py"))]
    for line, _, _ in EVIDENCE_CASES:
        body = line.rstrip("\n")
        texts += [
            body, body + "\n", "x = 1\n" + body, "x = 1\r\n" + body.replace("\n", "\r\n") + "\r\n",
            "# cpu nccl get_rank() is_available() .cu' \"cpu\" apex\n" + body + "\nmore = 2\n",
        ]
    return texts


def test_evidence_searched_line_by_line_is_the_whole_text_search():
    """`_first_match` searches only the lines holding a need: the same first match as the whole text's search, for
    every pattern (each matches within one line), on every fixture and every evidence case."""
    for text in _texts_with_evidence():
        for _, _, pattern, needs in intent._EVIDENCE:
            whole = pattern.search(text) if any(need in text for need in needs) else None
            expected = (whole.start(), whole.group(0)) if whole is not None else None
            assert intent._first_match(pattern, needs, text) == expected, (pattern.pattern, text[:200])


def test_import_statements_are_the_regex_own_matches():
    """`_import_statements` tries `_IMPORT` only at the starts of lines holding `import`: the same matches, in the same
    order, as the regex's own search of the whole text, on every fixture and on lists in brackets over several lines
    (one holding the word `import` on a later line, one whose later line reads as an import), imports inside strings and
    words holding `import`."""
    crafted = [
        "from a import (b,\n    c)\nimport d\n",
        "from a import (b,\n    import_c)\nimport d, e as f\n",
        # (Not Python, but text being edited: the second line is inside the first match.)
        "from a import (b,\n    import c)\n", "from a import (b,\nimport c) ; import d\n",
        "x = 'import y'\nreimported = 1\n  import z  # indented\nfrom . import (\n)\n",
        "from .m import *; import n\nimport",
        "import os\r\nfrom typing import (List,\r\n  Dict)\r\n",
    ]
    for text in _texts_with_evidence() + crafted:
        expected = [(found.start(), found.end(), found.groups()) for found in intent._IMPORT.finditer(text)]
        assert [(found.start(), found.end(), found.groups()) for found in intent._import_statements(text)] == expected, text[:200]


def test_a_storage_moved_by_map_location_is_reported_with_the_error_a_storage_raises():
    """A `map_location` function's `storage.cuda()` fails otherwise than a tensor's `.cuda()` on a CPU build: the
    message quotes what torch raises for a storage (run here when torch is installed and finds no GPU)."""
    path = FIXTURES / "device" / "TL205_map_location_storage.py"
    config = build({"select": ["TL205"], "preview": True}, root=FIXTURES, path=None, where="test", torch_requirement_from=FIXTURES)
    storage, tensor = lint_file(str(path), config).findings
    quoted = "TypeError: '<' not supported between instances of 'NoneType' and 'int'"
    assert quoted in storage.message and "AssertionError" not in storage.message
    assert "AssertionError: Torch not compiled with CUDA enabled" in tensor.message
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is there: the load would succeed")
    import io

    buffer = io.BytesIO()
    torch.save({"weight": torch.zeros(2)}, buffer)
    buffer.seek(0)
    with pytest.raises(TypeError) as raised:
        torch.load(buffer, map_location=lambda storage, loc: storage.cuda())
    assert f"{type(raised.value).__name__}: {raised.value}" == quoted
