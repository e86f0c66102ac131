"""Fixing one text: lint, apply the fixes that fit together, lint again, until nothing changes.

Every round works on fresh findings, so a fix never applies to text it was not
computed on. The result must still be Python: if a round breaks the code, the
whole text is left as it was and the rules whose fixes broke it are named, because
that is a torchlint bug the user should report, not something to skip quietly.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import libcst as cst

from torchlint.finding import Finding
from torchlint.fixes.edits import apply_fixes

MAX_ROUNDS = 10

Lint = Callable[[str], List[Finding]]


@dataclass
class FixResult:
    original: str
    text: str
    # Findings whose fix was applied, in the order applied.
    fixed: List[Finding] = field(default_factory=list)
    # Findings of `text`, and of the original text.
    findings: List[Finding] = field(default_factory=list)
    original_findings: List[Finding] = field(default_factory=list)
    # Bug reports for the user: malformed fixes, fixes that broke the code, rounds that did not settle.
    problems: List[str] = field(default_factory=list)
    # True when the fixes were abandoned because they broke the code.
    broken: bool = False

    @property
    def changed(self) -> bool:
        return self.text != self.original

    def revert(self) -> None:
        """Forget the fixes (they were not written): the original text and its findings stand."""
        self.text = self.original
        self.fixed = []
        self.findings = self.original_findings


def applicable(finding: Finding, unsafe: bool) -> bool:
    fix = finding.fix
    if fix is None or finding.cell is not None:
        return False
    return fix.applicability == "safe" or (unsafe and fix.applicability == "unsafe")


def fix_text(text: str, lint: Lint, unsafe: bool = False, filename: str = "<unknown>", max_rounds: int = MAX_ROUNDS) -> FixResult:
    findings = lint(text)
    result = FixResult(original=text, text=text, findings=findings, original_findings=findings)
    checker = _SyntaxCheck(text, filename)
    for _ in range(max_rounds):
        candidates = [finding for finding in result.findings if applicable(finding, unsafe)]
        if not candidates:
            return result
        applied = apply_fixes(result.text, [finding.fix for finding in candidates])
        for index, reason in applied.malformed:
            problem = f"{filename}: the fix of {_rule(candidates[index])} cannot be applied: {reason}; please report this torchlint bug"
            if problem not in result.problems:  # the same finding comes back every round
                result.problems.append(problem)
        taken = [candidates[index] for index in applied.applied]
        if applied.text == result.text:
            return result
        error = checker.error(applied.text)
        if error is not None:
            return _abandon(result, checker, taken, error, filename)
        result.text = applied.text
        result.fixed.extend(taken)
        result.findings = lint(result.text)
    still = sorted({_rule(finding) for finding in result.findings if applicable(finding, unsafe)})
    if still:
        result.problems.append(
            f"{filename}: fixes did not settle after {max_rounds} rounds ({', '.join(still)} still offer fixes); "
            "please report this torchlint bug"
        )
    return result


def _abandon(result: FixResult, checker: "_SyntaxCheck", taken: Sequence[Finding], error: str, filename: str) -> FixResult:
    """Keep the original text, and name the fixes that break the code on their own (all of the round's if none does)."""
    culprits = [finding for finding in taken if checker.error(apply_fixes(result.text, [finding.fix]).text) is not None]
    rules = sorted({_rule(finding) for finding in culprits or taken})
    result.problems.append(
        f"{filename}: the fix of {', '.join(rules)} would make the code invalid ({error}); "
        "the file was left unchanged. This is a torchlint bug: please report it with the code that triggers it"
    )
    result.revert()
    result.broken = True
    return result


def _rule(finding: Finding) -> str:
    return f"{finding.code} ({finding.name})"


class _SyntaxCheck:
    """Is the fixed text still a module libcst reads and Python compiles, as far as the original was?"""

    def __init__(self, original: str, filename: str):
        self.filename = filename
        # Snippets may hold code that only compiles in context (`return` at top level): hold them to the AST only.
        self.compiles = self._compile_error(original, full=True) is None

    def error(self, text: str) -> Optional[str]:
        try:
            cst.parse_module(text)
        except cst.ParserSyntaxError as error:
            first_line = error.message.strip().splitlines()[0] if error.message.strip() else "cannot parse"
            return f"SyntaxError at {error.raw_line}:{error.raw_column + 1}: {first_line}"
        except RecursionError:
            return "the result is nested too deeply to parse"
        return self._compile_error(text, full=self.compiles)

    def _compile_error(self, text: str, full: bool) -> Optional[str]:
        try:
            with warnings.catch_warnings():
                # Invalid escape sequences and the like are the user's business, not a broken fix.
                warnings.simplefilter("ignore")
                compile(text, self.filename, "exec", flags=0 if full else ast.PyCF_ONLY_AST, dont_inherit=True)
        except SyntaxError as error:
            return f"SyntaxError at {error.lineno}:{error.offset}: {error.msg}"
        except (ValueError, RecursionError, MemoryError) as error:
            return f"{type(error).__name__}: {error}"
        return None
