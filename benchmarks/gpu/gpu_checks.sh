#!/usr/bin/env bash
# The GPU checks of avatargen's placement and offload, in one command of under 8 minutes, on any Linux machine with
# an NVIDIA GPU and torch (CUDA build) installed.
#
# With network on the GPU machine:   git clone <avatargen> && cd avatargen && bash benchmarks/gpu/gpu_checks.sh
# Without (an air-gapped GPU box):   on a machine with network, in the checkout,
#                                        bash benchmarks/gpu/fetch_offload_wheels.sh   # benchmarks/gpu/wheels/, ~37 MB
#                                    copy the whole checkout, benchmarks/gpu/wheels/ included, to the GPU machine
#                                    (e.g. rsync -a avatargen/ gpu:avatargen/), then there:
#                                        bash benchmarks/gpu/gpu_checks.sh
#
# Steps, each with its own time limit (the whole under GPU_CHECKS_BUDGET_S, default 450 s): install the wheels (if
# present) and avatargen, offline; pytest tests/runtime (with the CUDA paths, slow ones too);
# benchmarks/gpu/gpu_block_overlap.py (GPU busy share during a block-offloaded forward >= 95 %, pinned host bytes <= 1.05 x
# the weights); a short `avatargen render` of the shipped model on CUDA with runtime.offload=block;
# model=liveavatar at 704*384 with LIVEAVATAR_CKPT=ckpt/ set (gen_fps, ttff_s), else liveavatar_tiny on CUDA;
# benchmarks/distributed/sequence_parallel.py one-rank-mesh (the Wan2.1-1.3B DiT at 480p's 32,760 tokens, bf16: its forward with
# the tokens whole against the Ulysses path on a 1-rank group, target <= 2 %); benchmarks/gpu/gpu_offload.py (120 s);
# then benchmarks/gpu/gpu_wan.py (InfiniteTalk at full size, random weights: s/step, device memory, RSS, TTFF per
# policy) with what is left, half of it per policy.
# Writes under $OUT (default out/gpu_checks): gpu_checks.log (everything), env.txt, block_overlap.json, render.json,
# render.mp4 (+ render.yaml), gpu_wan.json, one_rank_mesh.json, gpu_offload.json. Exit code 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/gpu_checks}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECKS_BUDGET_S:-450}
START=$SECONDS

step() { echo; echo "== [$((SECONDS - START)) s] $*"; }

main() {
  step "machine"
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
    $PY -m pip list --disable-pip-version-check 2>/dev/null
  } >"$OUT/env.txt" 2>&1
  head -2 "$OUT/env.txt"

  step "install the carried wheels and avatargen, offline"
  if compgen -G "benchmarks/gpu/wheels/*.whl" >/dev/null; then
    # Resolve against what the image has; if that fails (a dependency the image lacks), take the wheels as they are.
    names=$(ls benchmarks/gpu/wheels/*.whl | xargs -n1 basename | cut -d- -f1 | tr _ - | sort -u | tr '\n' ' ')
    $PY -m pip install -q --disable-pip-version-check --no-index --find-links benchmarks/gpu/wheels $names \
      || $PY -m pip install -q --disable-pip-version-check --no-index --no-deps benchmarks/gpu/wheels/*.whl
  else
    echo "no benchmarks/gpu/wheels/: rows (d) diffusers print 'skipped (not installed)'; avatargen's own deps must be there"
  fi
  if ! $PY -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation -e .; then
    echo "editable install failed: running from the checkout (PYTHONPATH)"
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  $PY -c "import avatargen.runtime.offload, omegaconf, soundfile, imageio_ffmpeg; print('avatargen ok')" || true
  $PY -c "import diffusers, accelerate; print('diffusers', diffusers.__version__, 'accelerate', accelerate.__version__)" || true

  step "pytest tests/runtime (CUDA available: CUDA paths run; -o addopts= also runs tests marked slow)"
  timeout 120 $PY -m pytest -q -p no:cacheprovider -o addopts= tests/runtime
  pytest_rc=$?

  step "benchmarks/gpu/gpu_block_overlap.py (busy share >= 95 %, pinned <= 1.05 x weights)"
  timeout 60 $PY benchmarks/gpu/gpu_block_overlap.py | tee "$OUT/block_overlap.json"
  overlap_rc=${PIPESTATUS[0]}

  step "avatargen render on CUDA, runtime.offload=block (shipped tiny model)"
  timeout 60 $PY -m avatargen render -i examples/avatar_1.png -a examples/speech_1.flac -o "$OUT/render.mp4" \
    --json --quiet runtime.device=cuda runtime.offload=block >"$OUT/render.json"
  render_rc=$?
  cat "$OUT/render.json"

  if [[ -n "${LIVEAVATAR_CKPT:-}" ]]; then  # the ckpt/ folder of docs/liveavatar.md (Wan2.2-S2V-14B + LiveAvatar)
    step "model=liveavatar, real weights at 704*384: gen_fps and ttff_s (--json) of a 10-s render"
    timeout 600 $PY -m avatargen render -i examples/avatar_1.png -a examples/speech_1.flac -o "$OUT/liveavatar.mp4" \
      --json --quiet model=liveavatar model.checkpoint="$LIVEAVATAR_CKPT" runtime.device=cuda >"$OUT/liveavatar.json"
  else
    step "model=liveavatar_tiny on CUDA (the block loop and its KV rings on the GPU; LIVEAVATAR_CKPT=ckpt/ for real weights)"
    timeout 120 $PY -m avatargen render -i examples/avatar_1.png -a examples/speech_1.flac -o "$OUT/liveavatar.mp4" \
      --json --quiet model=liveavatar_tiny runtime.device=cuda >"$OUT/liveavatar.json"
  fi
  la_rc=$?
  cat "$OUT/liveavatar.json"

  step "benchmarks/distributed/sequence_parallel.py one-rank-mesh: the Ulysses path on one GPU costs <= 2 % (Wan2.1-1.3B, 32,760 tokens, bf16)"
  timeout 120 $PY benchmarks/distributed/sequence_parallel.py one-rank-mesh --device cuda --dtype bfloat16 --repeats 3 \
    | tee "$OUT/one_rank_mesh.json"
  mesh_rc=${PIPESTATUS[0]}
  grep -q '"met": true' "$OUT/one_rank_mesh.json" || mesh_rc=1

  step "benchmarks/gpu/gpu_offload.py (budget 120 s)"
  timeout 150 $PY benchmarks/gpu/gpu_offload.py --budget-s 120 --json-out "$OUT/gpu_offload.json"
  bench_rc=$?

  # InfiniteTalk at full size last, with what is left: each policy in a child that prints its stacks when its
  # time is up (the row in gpu_wan.json says where a slow policy was).
  left=$((BUDGET - (SECONDS - START) - 10))
  if ((left >= 120)); then
    step "benchmarks/gpu/gpu_wan.py: model=infinitetalk model.weights=random at 640x640, 1 clip x 2 steps, offload none and block (${left} s)"
    timeout $((left + 20)) $PY benchmarks/gpu/gpu_wan.py --policies none block --clips 1 --steps 2 \
      --timeout-s $((left / 2)) --json-out "$OUT/gpu_wan.json"
    wan_rc=$?
  else
    step "benchmarks/gpu/gpu_wan.py skipped: ${left} s left of GPU_CHECKS_BUDGET_S=$BUDGET (needs 120)"
    wan_rc=1
  fi

  step "done: pytest rc=$pytest_rc, block_overlap rc=$overlap_rc, render rc=$render_rc, gpu_wan rc=$wan_rc, liveavatar rc=$la_rc, one_rank_mesh rc=$mesh_rc, gpu_offload rc=$bench_rc"
  [[ $pytest_rc == 0 && $overlap_rc == 0 && $render_rc == 0 && $wan_rc == 0 && $la_rc == 0 && $mesh_rc == 0 && $bench_rc == 0 ]]
}

main 2>&1 | tee "$OUT/gpu_checks.log"
exit "${PIPESTATUS[0]}"
