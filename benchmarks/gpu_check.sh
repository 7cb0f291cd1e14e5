#!/usr/bin/env bash
# GPU check (issue 5): whenever an NVIDIA GPU is at hand, in under 5 minutes:
#   1. the tests that take a device, on cuda (RL_STUDIO_TEST_DEVICE=cuda; --all-tests: every
#      non-slow, non-browser test);
#   2. the env throughput benchmark at num_envs 4096, 16384 and 65536 for each native env
#      (benchmarks/envs.py --device cuda);
#   3. PPO training throughput on cuda at the same num_envs (python -m benchmarks --only scaling);
# then prints the tables. Results go to benchmarks/results/gpu/.
#
#   bash benchmarks/gpu_check.sh [--all-tests]
#
# GPU_CHECK_DEVICE=cpu GPU_CHECK_NUM_ENVS="256 1024" bash benchmarks/gpu_check.sh  tries the
# script itself on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."

DEVICE=${GPU_CHECK_DEVICE:-cuda}
read -r -a NUM_ENVS <<< "${GPU_CHECK_NUM_ENVS:-4096 16384 65536}"
OUT=${GPU_CHECK_OUT:-benchmarks/results/gpu}
PYTEST_SCOPE=(-p benchmarks.pytest_device_tests)
PYTEST_SECONDS=150
if [[ "${1:-}" == "--all-tests" ]]; then PYTEST_SCOPE=(); PYTEST_SECONDS=900; fi  # then over 5 minutes

export RL_STUDIO_TEST_DEVICE=$DEVICE SDL_VIDEODRIVER=dummy SDL_AUDIODRIVER=dummy \
       GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 PYGAME_HIDE_SUPPORT_PROMPT=1

if [[ $DEVICE == cuda* ]] && ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine" \
         "with an NVIDIA GPU and a CUDA build of torch." >&2
    exit 2
fi
mkdir -p "$OUT"
START=$SECONDS
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"

echo "== 1/3 tests on $DEVICE =="
timeout "$PYTEST_SECONDS" python -m pytest -q -m "not slow and not browser" -x "${PYTEST_SCOPE[@]}" \
    2>&1 | tee "$OUT/tests.txt" | tail -n 25
test_status=${PIPESTATUS[0]}
if [[ $test_status -ne 0 && $test_status -ne 5 ]]; then status=1; fi   # 5: no test selected

echo "== 2/3 env throughput on $DEVICE =="
timeout 90 python benchmarks/envs.py --device "$DEVICE" --num-envs "${NUM_ENVS[@]}" --no-gym \
    --envs cartpole flappy_bird snake --json "$OUT/envs.json" 2>&1 | tee "$OUT/envs.txt"
if [[ ${PIPESTATUS[0]} -ne 0 ]]; then status=1; fi

echo "== 3/3 PPO training throughput on $DEVICE =="
SCALING=$(IFS=,; echo "${NUM_ENVS[*]}")
timeout 150 python -m benchmarks --only scaling --device "$DEVICE" --scaling-envs "$SCALING" \
    --throughput-steps 2000000 --ceiling-seconds 2 --out "$OUT" 2>&1 | tee "$OUT/training.txt"
if [[ ${PIPESTATUS[0]} -ne 0 ]]; then status=1; fi

echo "gpu_check finished in $((SECONDS - START)) s with status $status; figures in $OUT/"
exit $status
