"""The performance benchmark: `python benchmarks/run.py` (docs/performance.md shows its last run).

One command, from a fresh clone: it fetches the corpus (benchmarks/corpus.py),
installs TorchFix 0.7.0 in its own virtual environment under benchmarks/.cache
(TorchFix pins its own libcst), then times, alternating the tools within each
repetition so that a busy machine slows them alike:

- the floor: `libcst.parse_module` on every file torchlint parses, one process (and,
  for comparison, the same files parsed as torchlint parses them: cycle collector
  paused, libcst's re-validation of parsed nodes skipped);
- torchlint cold with one process, cold with every core, warm (cache, nothing changed);
- TorchFix with all its rules, one process;
- `flake8 --select TL` against flake8 without the torchlint plugin;
- `ruff check --no-cache --select ALL` on the same files;

then rounds of back-to-back runs (floor, cold, every core, warm) whose ratios decide
the ratio targets (runs seconds apart see the same machine; medians minutes apart
do not), then a scaling series (the sample copied 2x and 4x), and on the whole corpus the
findings with and without the prefilter. Findings must be identical between cold,
warm, one process and many: a difference fails the run. The table goes to stdout
and into docs/performance.md between its `benchmark` markers.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import inspect
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

BENCH = corpus.CACHE / "bench"
TORCHFIX_VENV = corpus.CACHE / "torchfix-venv"
TORCHFIX = "torchfix==0.7.0"
DOC = REPOSITORY / "docs" / "performance.md"
START, END = "<!-- benchmark:start -->", "<!-- benchmark:end -->"
LOAD_AT_START = os.getloadavg()[0]
# Small enough that TorchFix (about 30x the parse floor) fits the 15-minute budget on 2 cores.
SAMPLE = ("opacus", "pytorch-ignite")

# The floor: what any libcst-based linter pays before looking at a single node. With `--as-torchlint`, each file
# is parsed as torchlint parses it: cycle collector paused, libcst's re-validation of the parsed nodes skipped
# (torchlint/engine/parsing.py). For comparison only (the target is the plain floor): what is left between that
# and torchlint is its own analysis.
FLOOR = """
import gc, sys, libcst
from torchlint import source
as_torchlint = "--as-torchlint" in sys.argv[2:]
if as_torchlint:
    from torchlint.engine.parsing import parse_module
else:
    parse_module = libcst.parse_module
for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    with open(path, "rb") as handle:
        text = source.decode(handle.read()).text
    if as_torchlint:
        gc.disable()
    try:
        parse_module(text)
    except Exception:
        pass
    gc.enable()
"""
# torchlint with the prefilter off: every rule runs on every file (the command line always leaves it on).
UNFILTERED = """
import functools, sys
from torchlint import cli
cli.lint_files = functools.partial(cli.lint_files, use_prefilter=False)
sys.exit(cli.main(sys.argv[1:]))
"""
# flake8 as if torchlint were not installed: its plugin is hidden from flake8's plugin finder.
FLAKE8_WITHOUT_PLUGIN = """
import importlib.metadata, sys
found = importlib.metadata.distributions
importlib.metadata.distributions = lambda **kw: (d for d in found(**kw) if d.metadata["Name"] != "torchlint")
from flake8.main.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass
class Run:
    wall: float
    cpu: float
    peak_mb: float
    output: Path


@dataclass
class Variant:
    name: str
    command: List[str]
    files: int
    lines: int
    runs: List[Run] = field(default_factory=list)
    # Primed before timing (the warm cache).
    prime: bool = False

    @property
    def seconds(self) -> float:
        return statistics.median(run.wall for run in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(run.cpu for run in self.runs)

    @property
    def peak_mb(self) -> float:
        return max(run.peak_mb for run in self.runs)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def measure(command: Sequence[str], output: Path, cwd: Path, env: Optional[dict] = None) -> Run:
    """Wall time, CPU time and peak resident memory (the largest process) of one command."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "wb") as out, open(output.with_suffix(".err"), "wb") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}; see {output}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, output)


# ---------------------------------------------------------------- setup


def link_tree(source: Path, target: Path) -> None:
    """Copy a folder by hard links (real, distinct paths: torchlint lints each copy)."""
    for path in corpus.python_files(source):
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, destination)
        except OSError:
            shutil.copyfile(path, destination)


def bench_folders(packages: Sequence[corpus.Package]) -> Dict[int, Path]:
    """The sample once, twice and four times, each copy in its own folder. Each is a project of its own, as a user's
    checkout is (a folder just below the cache's hidden folder: `analysis/intent.project_root`): TL205's project scan
    reads the sample it lints, not the other scales' copies beside it."""
    folders = {}
    for scale in (1, 2, 4):
        folder = corpus.CACHE / f"bench-x{scale}"
        marker = folder / corpus.COMPLETE
        wanted = ",".join(f"{package.name}-{package.version}" for package in packages)
        if not (marker.exists() and marker.read_text() == wanted):
            shutil.rmtree(folder, ignore_errors=True)
            for copy in range(scale):
                for package in packages:
                    link_tree(package.folder, folder / f"copy{copy}" / package.folder.name)
            marker.write_text(wanted)
        folders[scale] = folder
    return folders


def torchfix_executable() -> Path:
    executable = TORCHFIX_VENV / "bin" / "torchfix"
    if not executable.exists():
        log(f"installing {TORCHFIX} in {TORCHFIX_VENV}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(TORCHFIX_VENV)], check=True)
        subprocess.run([str(TORCHFIX_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", TORCHFIX], check=True)
    return executable


def lint_targets(folder: Path, config):
    """The files torchlint lints under `folder` and those it parses (the rest the prefilter skips)."""
    from torchlint import source as sources
    from torchlint.discovery import discover
    from torchlint.engine import runner
    from torchlint.engine.file_text import FileText

    files = [path for path, _ in discover([str(folder)], config, respect_gitignore=False)]
    parsed = []
    lines = 0
    for path in files:
        with open(path, "rb") as handle:
            data = handle.read()
        lines += data.count(b"\n")
        try:
            text = sources.decode(data).text
        except sources.SourceError:
            continue
        if not (prefilter_wired() and runner.rules_to_run(FileText(text, path), config.codes_for(path)) is None):
            parsed.append(path)
    return files, parsed, lines


def prefilter_wired() -> bool:
    from torchlint.engine import runner

    return "prefilter." in inspect.getsource(runner)


# ---------------------------------------------------------------- findings


def findings_of(output: Path) -> List[str]:
    """torchlint's JSON findings, each as one canonical string (fix included), sorted."""
    return sorted(json.dumps(item, sort_keys=True) for item in json.loads(output.read_text() or "[]"))


def same_findings(runs: Dict[str, Path]) -> List[str]:
    """Names of runs whose findings differ from the first run's."""
    names = list(runs)
    reference = findings_of(runs[names[0]])
    return [name for name in names[1:] if findings_of(runs[name]) != reference]


def prove_prefilter(torchlint: List[str], config, outputs: Path, jobs: int) -> str:
    """Lint the whole corpus with the prefilter and without it (every rule on every file): findings must be identical."""
    whole_files, whole_parsed, whole_lines = lint_targets(corpus.CORPUS, config)
    log(f"whole corpus: {len(whole_files)} files; linting them with the prefilter and without it")
    runs = {}
    for name, command in (("with", torchlint), ("without", [sys.executable, "-c", UNFILTERED] + torchlint[3:])):
        runs[name] = outputs / f"corpus-{name}-prefilter.json"
        timed = measure(command + ["--no-cache", "--jobs", str(jobs), str(corpus.CORPUS)], runs[name], BENCH)
        log(f"  {name} the prefilter: {timed.wall:.1f} s")
    with_prefilter, without = findings_of(runs["with"]), findings_of(runs["without"])
    lost = sorted(set(without) - set(with_prefilter))
    verdict_text = "identical, no finding lost" if with_prefilter == without else f"DIFFERENT: {len(lost)} findings lost"
    return (
        f"whole corpus: {len(whole_files)} files, {whole_lines} lines; the prefilter leaves "
        f"{len(whole_files) - len(whole_parsed)} files unparsed and runs each rule only where its triggers occur; "
        f"findings with it and without it ({len(without)}): {verdict_text}"
    )


# ---------------------------------------------------------------- report


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as handle:
            memory = f", {int(handle.readline().split()[1]) / 1024 ** 2:.0f} GiB memory"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {cores()} cores{memory}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def versions(torchfix: Optional[Path]) -> str:
    from importlib.metadata import version

    parts = [f"torchlint {version('torchlint')}", f"libcst {version('libcst')}"]
    for tool in ("ruff", "flake8"):
        found = subprocess.run([sys.executable, "-m", tool, "--version"], capture_output=True, text=True)
        parts.append(f"{tool} {found.stdout.split()[0] if tool == 'flake8' else found.stdout.split()[-1]}" if found.returncode == 0 else f"{tool} missing")
    if torchfix is not None:
        parts.append(TORCHFIX.replace("==", " ").replace("torchfix", "TorchFix"))
    return ", ".join(parts)


def table(variants: Sequence[Variant], floor: Variant, torchfix: Optional[Variant]) -> str:
    header = "| run | files | lines | seconds (median) | CPU s | files/s | peak MB | x floor | x TorchFix |"
    rows = [header, "|" + "---|" * 9]
    for variant in variants:
        to_torchfix = f"{variant.seconds / torchfix.seconds:.3f}" if torchfix else "-"
        rows.append(
            f"| {variant.name} | {variant.files} | {variant.lines} | {variant.seconds:.2f} | {variant.cpu:.2f} "
            f"| {variant.files / variant.seconds:.0f} | {variant.peak_mb:.0f} | {variant.seconds / floor.seconds:.2f} | {to_torchfix} |"
        )
    return "\n".join(rows)


def profile_table(command: List[str], outputs: Path) -> str:
    """Profile one run of `command` (a `python -m MODULE ...` command) with pyinstrument; its table."""
    stats_file = outputs / "profile.pstats"
    python, _, module, *arguments = command
    measure([python, "-m", "pyinstrument", "-r", "pstats", "-o", str(stats_file), "-m", module, *arguments], outputs / "profile.out", BENCH)
    return render_profile(stats_file)


def render_profile(stats_file: Path, top: int = 15) -> str:
    """The functions with the most self time, and torchlint's own functions with the most total time, in % of the run."""
    import pstats

    stats = pstats.Stats(str(stats_file)).stats
    # A recursive function's total is counted once per level of nesting (the walk's `visit` would show
    # thousands of percent): only functions that do not call themselves have a meaningful total.
    own = [item for item in stats.items() if "/torchlint/" in item[0][0] and item[0] not in item[1][4]]
    # The whole run: torchlint's entry point (pyinstrument's own root also counts time spent off the CPU).
    total = max(cumulative for _, (_, _, _, cumulative, _) in own)

    def where(key) -> str:
        filename, line, function = key
        short = filename.split("site-packages/")[-1]
        short = "torchlint/" + short.rsplit("/torchlint/", 1)[-1] if "/torchlint/" in short else short
        return f"`{function}` {short}:{line}"

    by_self = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    by_total = sorted(own, key=lambda item: -item[1][3])[:top]
    rows = ["| self % | function | | total % | torchlint function |", "|---|---|---|---|---|"]
    for (self_key, self_stats), (own_key, own_stats) in zip(by_self, by_total):
        rows.append(f"| {100 * self_stats[2] / total:.1f} | {where(self_key)} | | {100 * own_stats[3] / total:.1f} | {where(own_key)} |")
    return "\n".join(rows)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Time torchlint against the libcst floor, TorchFix, flake8 and ruff.")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each timed run (medians are reported)")
    parser.add_argument("--torchfix-reps", type=int, default=2, help="repetitions of TorchFix, the slowest run")
    parser.add_argument("--rounds", type=int, default=9, help="back-to-back rounds behind each ratio target (medians of the rounds' ratios)")
    parser.add_argument("--sample", default=",".join(SAMPLE), help="corpus packages timed against every tool")
    parser.add_argument("--no-full", action="store_true", help="skip the whole-corpus prefilter proof")
    parser.add_argument("--no-torchfix", action="store_true", help="skip TorchFix")
    parser.add_argument("--no-doc", action="store_true", help="print the report without writing docs/performance.md")
    args = parser.parse_args(argv)
    # `python -m ruff` without ruff exits 1, which a linter's run may do: a missing tool would be timed as a fast one.
    missing = [module for module in ("ruff", "pyinstrument", "flake8") if importlib.util.find_spec(module) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: pip install -e \".[dev,bench]\"")

    import torchlint
    from torchlint.config import load

    # The timed runs import torchlint from bytecode, as an installed package does: pip compiles a regular install
    # and Python writes the bytecode on first import, unless PYTHONDONTWRITEBYTECODE is set (as on this project's
    # machines), when every timed run would compile torchlint's modules again (about 0.06 s).
    compileall.compile_dir(Path(torchlint.__file__).parent, quiet=1)
    started = time.perf_counter()
    log("corpus")
    corpus.ensure()
    sample = corpus.by_name([name.strip() for name in args.sample.split(",") if name.strip()])
    folders = bench_folders(sample)
    torchfix = None if args.no_torchfix else torchfix_executable()
    BENCH.mkdir(parents=True, exist_ok=True)  # from a fresh clone with --no-torchfix nothing else has made it
    config_file = BENCH / "torchlint.toml"
    config_file.write_text("# The benchmark's config: torchlint's defaults, cache in this folder.\n")
    config = load(config_file, BENCH)
    outputs = BENCH / "out"
    shutil.rmtree(outputs, ignore_errors=True)
    shutil.rmtree(BENCH / ".torchlint_cache", ignore_errors=True)
    jobs = cores()

    torchlint = [sys.executable, "-m", "torchlint", "check", "--config", str(config_file), "--no-respect-gitignore", "--output-format", "json", "--exit-zero"]
    targets = {}
    for scale, folder in folders.items():
        files, parsed, lines = lint_targets(folder, config)
        listing = BENCH / f"parsed-x{scale}.txt"
        listing.write_text("\n".join(parsed) + "\n")
        targets[scale] = (files, parsed, lines, listing)
    files, parsed, lines, listing = targets[1]
    x1 = str(folders[1])
    log(f"sample: {len(files)} files, {lines} lines; torchlint parses {len(parsed)} (prefilter {'wired' if prefilter_wired() else 'NOT wired'})")

    floor = Variant("floor: libcst.parse_module, 1 process", [sys.executable, "-c", FLOOR, str(listing)], len(parsed), lines)
    own_parse = Variant(
        "floor, parsed as torchlint parses (collector paused, no re-validation)",
        [sys.executable, "-c", FLOOR, str(listing), "--as-torchlint"], len(parsed), lines,
    )
    cold = Variant("torchlint cold, 1 process", torchlint + ["--no-cache", "--jobs", "1", x1], len(files), lines)
    many = Variant(f"torchlint cold, {jobs} processes", torchlint + ["--no-cache", "--jobs", str(jobs), x1], len(files), lines)
    warm = Variant(f"torchlint warm (cache), {jobs} processes", torchlint + ["--jobs", str(jobs), x1], len(files), lines, prime=True)
    flake8_tl = Variant("flake8 --select TL, 1 process", [sys.executable, "-m", "flake8", "--isolated", "--jobs", "1", "--exit-zero", "--select", "TL", x1], len(files), lines)
    flake8_plain = Variant(
        "flake8 without the plugin (E,F,W,C90), 1 process",
        [sys.executable, "-c", FLAKE8_WITHOUT_PLUGIN, "--isolated", "--jobs", "1", "--exit-zero", x1], len(files), lines,
    )
    ruff = Variant(
        "ruff check --no-cache --select ALL",
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--no-respect-gitignore", "--select", "ALL", "--exit-zero", "--quiet", x1],
        len(files), lines,
    )
    variants = [floor, own_parse, cold, many, warm, flake8_tl, flake8_plain, ruff]
    torchfix_variant = None
    if torchfix is not None:
        torchfix_variant = Variant("TorchFix 0.7.0 --select ALL, 1 process", [str(torchfix), "--select", "ALL", "--jobs", "1", x1], len(files), lines)
        variants.insert(1, torchfix_variant)

    log("priming the warm cache")
    measure(warm.command, outputs / "prime.json", BENCH)
    for rep in range(args.reps):
        # Rotate the order each repetition: no tool always runs first (cold disk cache) or last.
        order = variants[rep % len(variants):] + variants[: rep % len(variants)]
        for variant in order:
            if variant is torchfix_variant and rep >= args.torchfix_reps:
                continue
            log(f"rep {rep + 1}/{args.reps}: {variant.name}")
            variant.runs.append(measure(variant.command, outputs / f"{variants.index(variant)}-{rep}.out", BENCH))

    # The ratio targets compare runs made seconds apart: on a shared machine the speed drifts from one minute to
    # the next (the medians above, minutes apart, move by 10-20%), but two runs in a row see the same machine.
    rounds = [floor, own_parse, cold, many, warm]
    ratios: Dict[str, List[float]] = {"floor": [], "own parse": [], "processes": [], "warm": []}
    for round_index in range(args.rounds):
        log(f"round {round_index + 1}/{args.rounds}: floor, floor parsed as torchlint parses, cold, {jobs} processes, warm")
        order = rounds[round_index % len(rounds):] + rounds[: round_index % len(rounds)]
        timed = {}
        for variant in order:
            timed[variant.name] = run = measure(variant.command, outputs / f"round{round_index}-{rounds.index(variant)}.out", BENCH)
            variant.runs.append(run)
        cold_wall = timed[cold.name].wall
        ratios["floor"].append(cold_wall / timed[floor.name].wall)
        ratios["own parse"].append(cold_wall / timed[own_parse.name].wall)
        ratios["processes"].append(cold_wall / timed[many.name].wall)
        ratios["warm"].append(cold_wall / timed[warm.name].wall)

    log("scaling series")
    scaling = []
    for scale in (2, 4):
        scaled_files, scaled_parsed, scaled_lines, scaled_listing = targets[scale]
        scaled_floor = Variant(f"floor x{scale}", [sys.executable, "-c", FLOOR, str(scaled_listing)], len(scaled_parsed), scaled_lines)
        scaled_cold = Variant(f"torchlint cold, 1 process, x{scale}", torchlint + ["--no-cache", "--jobs", "1", str(folders[scale])], len(scaled_files), scaled_lines)
        for variant in (scaled_floor, scaled_cold):
            log(variant.name)
            variant.runs.append(measure(variant.command, outputs / f"scale{scale}-{len(scaling)}.out", BENCH))
            scaling.append(variant)

    log("checking findings: cold / warm / 1 process / many processes")
    differing = same_findings({f"{variant.name} #{index}": run.output for variant in (cold, many, warm) for index, run in enumerate(variant.runs)})
    if differing:
        raise SystemExit(f"findings differ from the first cold run in: {', '.join(differing)}")
    sample_findings = len(findings_of(cold.runs[0].output))

    proof = ""
    if not args.no_full:
        proof = prove_prefilter(torchlint, config, outputs, jobs)
        log(proof)

    log("profile (pyinstrument), torchlint cold, 1 process")
    profile = profile_table(cold.command, outputs)

    report = render(
        args, variants, floor, torchfix_variant, cold, many, warm, ruff, flake8_tl, flake8_plain, scaling,
        proof, sample, len(parsed), sample_findings, time.perf_counter() - started, torchfix, jobs, profile, ratios,
    )
    print(report)
    if not args.no_doc:
        write_doc(report)
        log(f"wrote {DOC}")
    return 0


def render(args, variants, floor, torchfix_variant, cold, many, warm, ruff, flake8_tl, flake8_plain, scaling,
           proof, sample, parsed, sample_findings, elapsed, torchfix, jobs, profile, ratios) -> str:
    def paired(name: str) -> str:
        return f"median of {len(ratios[name])} back-to-back rounds, range {min(ratios[name]):.2f}-{max(ratios[name]):.2f}"

    to_floor, to_own_parse = statistics.median(ratios["floor"]), statistics.median(ratios["own parse"])
    speedup, warm_speedup = statistics.median(ratios["processes"]), statistics.median(ratios["warm"])
    lines = [
        f"Machine: {machine()}.",
        f"Versions: {versions(torchfix)}.",
        f"Sample: {', '.join(f'{package.name} {package.version}' for package in sample)} "
        f"({cold.files} files, {cold.lines} lines; torchlint parses {parsed} of them, {sample_findings} findings). "
        f"{args.reps} repetitions, alternating ({args.torchfix_reps} for TorchFix); the benchmark took {elapsed / 60:.1f} minutes.",
        "",
        table(variants, floor, torchfix_variant),
        "",
        "Scaling (one run each; cost per line stays flat when it grows linearly):",
        "",
        "| run | files | lines | seconds | seconds per 100k lines | peak MB |",
        "|---|---|---|---|---|---|",
    ]
    for variant in [floor, cold] + list(scaling):
        lines.append(f"| {variant.name} | {variant.files} | {variant.lines} | {variant.seconds:.2f} | {variant.seconds / variant.lines * 1e5:.2f} | {variant.peak_mb:.0f} |")
    lines += ["", "Where one cold process spends its time (pyinstrument samples, this run):", "", profile, "", "Targets (this run):", ""]
    lines.append(
        f"- one process, cold: {near(to_floor, 1.3)}x the parse floor ({paired('floor')}) (target <= 1.3): {verdict(to_floor <= 1.3)}"
    )
    lines.append(
        f"- the same against the floor parsed as torchlint parses (collector paused, no re-validation), which "
        f"leaves torchlint's own analysis: {to_own_parse:.2f}x ({paired('own parse')})"
    )
    if torchfix_variant is not None:
        lines.append(
            f"- TorchFix / torchlint, one process each: {torchfix_variant.seconds / cold.seconds:.1f}x, CPU "
            f"{torchfix_variant.cpu / cold.cpu:.1f}x (target >= 10): {verdict(torchfix_variant.seconds >= 10 * cold.seconds)}"
        )
    lines.append(f"- warm cache: {warm_speedup:.1f}x faster than cold ({paired('warm')}) (target >= 20): {verdict(warm_speedup >= 20)}")
    lines.append(f"- warm cache / ruff: {warm.seconds / ruff.seconds:.2f}x (target <= 2): {verdict(warm.seconds <= 2 * ruff.seconds)}")
    lines.append(
        f"- {jobs} processes: {near(speedup, 0.8 * jobs)}x one process ({paired('processes')}) (target >= {0.8 * jobs:.1f}): "
        f"{verdict(speedup >= 0.8 * jobs)}"
    )
    lines.append(f"- flake8 --select TL / flake8 without the plugin: {flake8_tl.seconds / flake8_plain.seconds:.2f}x")
    lines.append(f"- peak memory, one process: {cold.peak_mb:.0f} MB at 1x, " + ", ".join(f"{variant.peak_mb:.0f} MB at {variant.name.rsplit(' ', 1)[-1]}" for variant in scaling if variant.name.startswith("torchlint")))
    lines.append("- findings identical between cold, warm, one process and many: yes (checked on every repetition)")
    if proof:
        lines.append(f"- prefilter: {proof}")
    lines.append(f"- load average (1 min) at the start and the end: {LOAD_AT_START:.1f}, {os.getloadavg()[0]:.1f}")
    return "\n".join(lines)


def near(ratio: float, target: float) -> str:
    """`ratio` with two decimals, or more where two would print the target itself: 1.598 shown as "1.60" beside a
    target of 1.6 read as met where the verdict says it is not."""
    for decimals in (2, 3, 4):
        shown = f"{ratio:.{decimals}f}"
        if ratio == target or float(shown) != target:
            break
    return shown


def write_doc(report: str) -> None:
    text = DOC.read_text() if DOC.exists() else f"# Performance\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text += f"\n{START}\n{END}\n"
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    DOC.write_text(f"{before}{START}\n{report}\n{END}{after}")


if __name__ == "__main__":
    sys.exit(main())
