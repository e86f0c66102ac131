"""Run a rewrite on a fixture and compare findings (shared by tests/test_metamorphic.py and benchmarks/metamorphic.py).

A case is one fixture file (with the other files of its project, for fixtures/projects/). It is a positive when it
expects a finding of a default rule, a trap otherwise. Running a rewrite on a case writes the rewritten program
into a temporary folder (with the rest of its project), lints every file the rewrite produced, and tells, for each
expected finding, whether a finding of the same code is on the marked statement, and which findings of default
rules no marker explains (on a trap: every one).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .rewrites import COPY_COMMENT, Marked, Rewrite, mark

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
PROJECTS = FIXTURES / "projects"


@lru_cache(maxsize=None)
def default_codes() -> frozenset:
    from torchlint.rules import all_rules

    return frozenset(rule.code for rule in all_rules() if not rule.opt_in)


def config_for(table: Tuple[Tuple[str, object], ...], root: Path = FIXTURES, requirement_from: Path = FIXTURES):
    """The config a fixture is linted with; a project's is rooted at the folder it is copied to, and takes its torch
    requirement from its own folder in fixtures/, as tests/test_projects.py lints it, so that its imports by dotted
    path and its torch version read as they do there."""
    from torchlint.config import build

    table = {key.replace("_", "-"): value for key, value in dict(table).items()}
    table.setdefault("select", ["ALL"])
    # Rules in preview are held to the same rewrites: they are on by default once they leave preview.
    table.setdefault("preview", True)
    return build(table, root=root, path=None, where="test", torch_requirement_from=requirement_from)


@dataclass(frozen=True)
class Case:
    name: str  # the fixture's path under fixtures/
    files: Tuple[Tuple[str, str], ...]  # every file of its project: (path in the project folder, text)
    target: str
    config: Tuple[Tuple[str, object], ...]
    marked: Marked

    @property
    def expected(self) -> Dict[int, Tuple[str, ...]]:
        """Markers and the default rules' codes expected on them (opt-in rules are outside the suite)."""
        found = {}
        for marker, codes in self.marked.codes.items():
            kept = tuple(code for code in codes if code in default_codes())
            if kept:
                found[marker] = kept
        return found

    @property
    def is_trap(self) -> bool:
        return not self.expected

    @property
    def codes(self) -> frozenset:
        return frozenset(code for codes in self.expected.values() for code in codes)


def _fixture_table(text: str) -> Tuple[Tuple[str, object], ...]:
    lines = [line.split("fixture-config:", 1)[1] for line in text.splitlines() if line.startswith("# fixture-config:")]
    return tuple(sorted(tomllib.loads("\n".join(lines)).items(), key=lambda item: item[0]))


def _compiles(text: str) -> bool:
    try:
        compile(text, "<fixture>", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    return True


def all_cases() -> List[Case]:
    """Every single-file fixture (as tests/test_fixtures.py lints them) and every project fixture's file."""
    cases = []
    for path in sorted(FIXTURES.rglob("*.py")):
        if "examples" in path.parts or "projects" in path.parts:
            continue
        text = path.read_text()
        if not _compiles(text):
            continue  # a parse-error fixture (TL000): no program to rewrite
        cases.append(Case(str(path.relative_to(FIXTURES)), ((path.name, text),), path.name, _fixture_table(text), mark(text)))
    for project in sorted(folder for folder in PROJECTS.iterdir() if folder.is_dir() and not folder.name.startswith("settings_")):
        files = tuple((str(path.relative_to(project)), path.read_text()) for path in sorted(project.rglob("*.py")))
        for relative, text in files:
            cases.append(Case(f"projects/{project.name}/{relative}", files, relative, (), mark(text)))
    return cases


@dataclass(frozen=True)
class Outcome:
    case: Case
    rewrite: str
    # (marker, code, found) for every expected finding of a rule the rewrite does not decline.
    expectations: Tuple[Tuple[int, str, bool], ...]
    # Findings of default rules no marker explains: (path, cell, row, code).
    unexplained: Tuple[Tuple[str, Optional[int], int, str], ...]

    def missed(self, code: Optional[str] = None) -> List[Tuple[int, str]]:
        return [(marker, c) for marker, c, found in self.expectations if not found and (code is None or c == code)]


def imported_by_another_file(case: Case) -> bool:
    """Another file of the case's project imports the target's module (`from trainer import train`, `import utils`,
    `from .modules.lp_norm import X`)."""
    stem = re.escape(Path(case.target).stem)
    importing = re.compile(rf"^[ \t]*(?:from[ \t]+[\w.]*\b{stem}\b|import[ \t]+[\w., \t]*\b{stem}\b)", re.MULTILINE)
    return any(importing.search(text) for relative, text in case.files if relative != case.target)


def run(case: Case, rewrite: Rewrite) -> Optional[Outcome]:
    """The outcome of `rewrite` on `case`; None where the rewrite does not apply. A module other project files import
    does not become a notebook: nothing can import a notebook, so that rewrite would change the program."""
    from torchlint.engine.parallel import lint_file_bytes

    if rewrite.name == "notebook" and imported_by_another_file(case):
        return None
    files = dict(case.files)
    config = config_for(case.config)
    program = rewrite.apply(case.marked.source, case.target, frozenset(files), config)
    if program is None:
        return None
    program.compile()
    places = program.places()
    folder = Path(tempfile.mkdtemp(prefix="metamorphic-"))
    try:
        files[case.target] = case.marked.source
        if program.target != case.target:
            del files[case.target]  # the fixture became a notebook
        files.update(program.files)
        for relative, text in files.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_text(text)
        if case.name.startswith("projects/"):
            config = config_for(case.config, folder, PROJECTS / case.name.split("/")[1])
        findings = {}
        for relative in program.files:
            path = folder / relative
            findings[relative] = lint_file_bytes(path.read_bytes(), str(path), config).findings
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    declined = set(rewrite.declines)
    copies = program.places(COPY_COMMENT)
    expectations = []
    explained = set()
    for marker, codes in sorted(case.expected.items()):
        place = places.get(marker)
        if place is None:
            raise AssertionError(f"{rewrite.name} lost marker {marker} of {case.name}")
        for code in codes:
            hits = [
                finding for finding in findings[place.path]
                if finding.code == code and place.holds(finding)
            ]
            explained.update(id(finding) for finding in hits)
            if code not in declined:
                expectations.append((marker, code, bool(hits)))
            copy = copies.get(marker)
            if copy is not None:
                explained.update(id(finding) for finding in findings[copy.path] if finding.code == code and copy.holds(finding))
    unexplained = tuple(
        (relative, finding.cell, finding.location.row, finding.code)
        for relative, found in sorted(findings.items())
        for finding in found
        if id(finding) not in explained and finding.code in default_codes() and finding.code not in declined
    )
    return Outcome(case, rewrite.name, tuple(expectations), unexplained)


@dataclass
class Tally:
    """Counts for one (rewrite, rule) pair."""

    found: int = 0
    expected: int = 0
    unexplained: int = 0  # findings no marker explains, on positives and traps alike

    @property
    def failures(self) -> int:
        return self.expected - self.found + self.unexplained


def tally(outcomes) -> Dict[Tuple[str, str], Tally]:
    """Per (rewrite, rule): expected findings found, and unexplained findings (on traps: false alarms)."""
    pairs: Dict[Tuple[str, str], Tally] = {}
    for outcome in outcomes:
        for _, code, found in outcome.expectations:
            pair = pairs.setdefault((outcome.rewrite, code), Tally())
            pair.expected += 1
            pair.found += found
        for *_, code in outcome.unexplained:
            pairs.setdefault((outcome.rewrite, code), Tally()).unexplained += 1
    return pairs
