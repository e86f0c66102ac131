#!/usr/bin/env bash
# GPU evidence: for `torchlint verify` (issue 6) the CUDA witnesses and the move/cast measurements;
# for `torchlint doctor --memory` (issue 21) its projected peak against torch.cuda.max_memory_allocated().
#
# Run from the repository root on a machine with an NVIDIA GPU and a CUDA build of torch:
#     OUT=/path/to/results bash benchmarks/gpu_check.sh
# Everything goes to $OUT (default ./gpu-results); each step has its own time limit, and the limits
# add up to 13.5 minutes. SECTIONS picks some of them (default "move_cast witnesses memory"):
#     SECTIONS=memory bash benchmarks/gpu_check.sh      # doctor --memory alone, at most 4 minutes
# Nothing here needs the network. Without a usable CUDA device it says so and exits 0, having
# measured nothing.
set -u
OUT=${OUT:-./gpu-results}
PYTHON=${PYTHON:-python}
SECTIONS=${SECTIONS:-move_cast witnesses memory}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "no CUDA device (torch.cuda.is_available() is False, or torch is missing): skipped, nothing measured" | tee "$OUT/summary.txt"
    exit 0
fi

echo "== environment" | tee "$OUT/summary.txt"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt" | tee -a "$OUT/summary.txt"

wanted() { case " $SECTIONS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# 1. Move and cast, measured directly (torch only): bytes allocated on the GPU, host allocations,
#    and time per host-to-device copy for both orders of move and cast (issue 6, TL202/TL206).
if wanted move_cast; then
echo "== move/cast measurements" | tee -a "$OUT/summary.txt"
timeout 120 "$PYTHON" - > "$OUT/move_cast.md" 2> "$OUT/move_cast.err" <<'PY'
import statistics
import torch
from torch.profiler import ProfilerActivity, profile

assert torch.cuda.is_available(), "no GPU"
N = 4_000_000


def host_allocations(fn):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    sizes = [e.cpu_memory_usage for e in prof.profiler.function_events if e.name.startswith("aten::empty") and e.cpu_memory_usage > 0]
    return len(sizes), sum(sizes)


def measure(fn, repeats=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    stats = None
    for _ in range(repeats):
        before = torch.cuda.memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        after = torch.cuda.memory_stats()
        times.append(start.elapsed_time(end))
        stats = (after["allocation.all.allocated"] - before["allocation.all.allocated"],
                 after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"])
    count, size = host_allocations(fn)
    return stats[0], stats[1], count, size, statistics.median(times)


print(f"# Move and cast on {torch.cuda.get_device_name(0)} (torch {torch.__version__}), {N:,} elements, median of 10\n")
print("| source | expression | GPU allocations | GPU bytes | host allocations | host bytes | ms |")
print("|---|---|---|---|---|---|---|")
for dtype in (torch.uint8, torch.int64, torch.float64):
    x = torch.randint(0, 100, (N,)).to(dtype)
    for label, fn in [
        ("x.float().cuda()", lambda: x.float().cuda()),
        ("x.cuda().float()", lambda: x.cuda().float()),
        ("x.to('cuda', torch.float32)", lambda: x.to("cuda", torch.float32)),
        ("x.to('cuda').to(torch.float32)", lambda: x.to("cuda").to(torch.float32)),
    ]:
        print(f"| {str(dtype)[6:]} | `{label}` | " + " | ".join(f"{v:.3f}" if isinstance(v, float) else f"{v:,}" for v in measure(fn)) + " |")
for label, fn in [
    ("torch.zeros(N).to('cuda')", lambda: torch.zeros(N).to("cuda")),
    ("torch.zeros(N).cuda()", lambda: torch.zeros(N).cuda()),
    ("torch.zeros(N, device='cuda')", lambda: torch.zeros(N, device="cuda")),
]:
    print(f"| float32 | `{label}` | " + " | ".join(f"{v:.3f}" if isinstance(v, float) else f"{v:,}" for v in measure(fn)) + " |")
PY
echo "exit $?" | tee -a "$OUT/summary.txt"

fi

# 2. The witnesses themselves on the GPU: canonical ones, then every fixture finding.
#    Needs torchlint's own dependencies (libcst, pathspec) next to torch.
if ! wanted witnesses; then
    :
elif "$PYTHON" -c "import libcst, pathspec" 2>/dev/null; then
    echo "== canonical witnesses and fixtures, --device cuda" | tee -a "$OUT/summary.txt"
    timeout 150 "$PYTHON" -m torchlint.verify.evidence --device cuda --output "$OUT/evidence-cuda.md" > "$OUT/evidence.log" 2>&1
    echo "exit $?" | tee -a "$OUT/summary.txt"
    cat "$OUT/evidence.log" | tee -a "$OUT/summary.txt"
    for code in TL202 TL205 TL206 TL104 TL201; do
        timeout 60 "$PYTHON" -m torchlint rule "$code" --verify --device cuda 2>&1 | tee -a "$OUT/summary.txt"
    done
else
    echo "== libcst/pathspec missing: witnesses not run (pip install libcst pathspec)" | tee -a "$OUT/summary.txt"
fi

# 3. doctor --memory: the projected peak of one training step (MLP, CNN, transformer; the loader's batch
#    size and 4 and 16 times it) against torch.cuda.max_memory_allocated() of the same step, projected on
#    the GPU and on the CPU. memory_check.py exits 1 (the "exit" line) when a projection made on the GPU is
#    off by more than its tolerance.
if wanted memory; then
    echo "== doctor --memory against torch.cuda.max_memory_allocated()" | tee -a "$OUT/summary.txt"
    timeout 240 "$PYTHON" benchmarks/memory_check.py --device cuda > "$OUT/memory.md" 2> "$OUT/memory.err"
    echo "exit $?" | tee -a "$OUT/summary.txt"
    cat "$OUT/memory.md" | tee -a "$OUT/summary.txt"
fi
