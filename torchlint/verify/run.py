"""Verify findings: build each one's witness, run the witnesses in isolation, read the verdicts.

Findings whose witnesses are the same program share one run. torch is never
imported here: the witnesses import it in their own processes.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

from torchlint.finding import Finding
from torchlint.verify import sandbox
from torchlint.verify.site import ParsedFile, Resolver
from torchlint.verify.witness import CANONICAL, FROM_FINDING, Witness
from torchlint.verify.witnesses import load_all

CONFIRMED, NOT_REPRODUCED = "confirmed", "not-reproduced"
DEVICES = ("cpu", "cuda", "auto")
_PROBE = """
import torch

confirmed(str(torch.cuda.is_available()))
"""


@dataclass(frozen=True)
class Verification:
    status: str  # "confirmed", "not-reproduced" or "skipped (<why>)"
    evidence: str
    device: str
    torch: str
    # "finding" (built from the finding's code), "canonical", or "" when nothing ran.
    witness: str = ""

    def as_json(self) -> dict:
        return {"status": self.status, "device": self.device, "evidence": self.evidence, "torch": self.torch, "witness": self.witness}


def installed_torch() -> Optional[str]:
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def resolve_device(requested: str, pool: sandbox.Pool) -> tuple:
    """(device to run on, or None; why not) for `cpu`, `cuda` or `auto`."""
    if requested == "cpu":
        return "cpu", ""
    probe = pool.run([sandbox.Job(_PROBE, "cpu", 60.0)], 1)[0]
    available = probe.verdict is not None and probe.verdict.get("evidence") == "True"
    if available:
        return "cuda", ""
    if requested == "cuda":
        return None, "CUDA is not available"
    return "cpu", ""


def plan(
    finding: Finding, text: Optional[str], config, device: str, files: Optional[dict] = None, resolver: Optional[Resolver] = None,
) -> Union[Witness, str]:
    """The witness for a finding, or the reason none can run; `files` caches each file's parse.

    `resolver` judges the names the finding's code reaches on the live objects (the fork
    server's); without it, only their spelling is judged here, and the live objects in the
    witness's process before its program runs.
    """
    entry = load_all().get(finding.code)
    if entry is None:
        return "no witness for this rule"
    if "internal error" in finding.message:
        return "the finding reports a torchlint internal error"
    site = None
    if text is not None:
        files = {} if files is None else files
        if finding.filename not in files:
            files[finding.filename] = ParsedFile.parse(finding.filename, text, config, resolver)
        parsed = files[finding.filename]
        site = parsed.site(finding, device) if parsed is not None else None
    if site is None:
        return entry.canonical("the flagged code could not be located", device)
    try:
        built = entry.derive(site, entry)
    except Exception as error:  # a builder's bug must not hide the verdicts of other findings
        return entry.canonical(f"building from the finding failed ({type(error).__name__})", device)
    if isinstance(built, Witness) and built.origin == FROM_FINDING:
        built = dataclasses.replace(built, checks=tuple(sorted(site.checked)))
    return built


def verify(
    findings: Sequence[Finding],
    sources: Mapping[str, str],
    config,
    pool: sandbox.Pool,
    requested_device: str = "auto",
    jobs: int = 2,
    progress: Optional[Callable[[int, int], None]] = None,
) -> List[Verification]:
    torch_version = installed_torch()
    if torch_version is None:
        return [Verification("skipped (torch is not installed)", "", requested_device, "")] * len(findings)
    device, why = resolve_device(requested_device, pool) if findings else ("cpu", "")
    if device is None:
        return [Verification(f"skipped ({why})", "", requested_device, torch_version)] * len(findings)
    files = {}
    resolver = pool.resolver(_names_to_judge(findings, sources, config, files))
    for parsed in files.values():
        if parsed is not None:
            parsed.resolver = resolver
    plans = [plan(finding, sources.get(finding.filename), config, device, files, resolver) for finding in findings]
    runs: Dict[tuple, int] = {}
    jobs_list: List[sandbox.Job] = []
    for planned in plans:
        if isinstance(planned, Witness) and planned.key not in runs:
            runs[planned.key] = len(jobs_list)
            jobs_list.append(sandbox.Job(planned.program, device, planned.timeout, planned.env, planned.checks))
    done = (lambda count: progress(count, len(jobs_list))) if progress else None
    outcomes = pool.run(jobs_list, jobs, done)
    results = []
    for planned in plans:
        if not isinstance(planned, Witness):
            results.append(Verification(f"skipped ({planned})", "", device, torch_version))
        else:
            results.append(judge(planned, outcomes[runs[planned.key]], device, torch_version))
    return results


def _names_to_judge(findings: Sequence[Finding], sources: Mapping[str, str], config, files: dict) -> set:
    """Every name the files with findings reach through their imports: judged by the fork server in one batch.

    Files are parsed without a resolver here; the resolver is set on them once it exists.
    """
    names = set()
    for filename in {finding.filename for finding in findings if finding.filename in sources}:
        parsed = files[filename] = ParsedFile.parse(filename, sources[filename], config)
        if parsed is not None:
            names |= parsed.dotted_names()
    return names


def judge(witness: Witness, outcome: sandbox.Outcome, device: str, torch_version: str) -> Verification:
    verdict = outcome.verdict
    if verdict is None:
        if outcome.timed_out:
            why = f"the witness timed out after {witness.timeout:g} s"
        else:
            last = (outcome.stderr.strip().splitlines() or [f"exit code {outcome.returncode}"])[-1]
            why = f"the witness failed: {last[:200]}"
        return Verification(f"skipped ({why})", "", device, torch_version, witness.origin)
    status = verdict["status"]
    if status == "skipped":
        status = f"skipped ({verdict.get('reason') or 'by the witness'})"
    evidence = verdict.get("evidence", "")
    if witness.origin == CANONICAL:
        evidence += f" [canonical witness{': ' + witness.note if witness.note else ''}]"
    elif witness.note:
        evidence += f" [from the finding's code; {witness.note}]"
    # One line per finding: flagged code may span lines.
    return Verification(status, " ".join(evidence.split()), verdict.get("device", device), verdict.get("torch", torch_version), witness.origin)


def canonical(code: str, device: str) -> Witness:
    entry = load_all().get(code)
    if entry is None:
        raise KeyError(code)
    return entry.canonical("", device)


def run_canonical(code: str, requested_device: str = "auto") -> Verification:
    """`torchlint rule CODE --verify`: the rule's canonical witness, run once."""
    torch_version = installed_torch()
    if torch_version is None:
        return Verification("skipped (torch is not installed)", "", requested_device, "")
    with sandbox.Pool() as pool:
        device, why = resolve_device(requested_device, pool)
        if device is None:
            return Verification(f"skipped ({why})", "", requested_device, torch_version)
        witness = canonical(code, device)
        outcome = pool.run([sandbox.Job(witness.program, device, witness.timeout, witness.env)], 1)[0]
    return judge(witness, outcome, device, torch_version)
