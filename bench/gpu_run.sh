#!/usr/bin/env bash
# Issue #30 on a lent GPU machine: the compiled kernel and engine tests, the kernel benchmark
# and the whole-model benchmark, each stage under its own time limit, every output written to
# $OUT as it comes (a stage cut short keeps what it measured; each test's outcome is streamed
# to gpu_tests_stream.log by bench/pytest_stream.py).
# Usage (repo root, on the device): OUT=/some/dir bash bench/gpu_run.sh STAGE[,STAGE...]
#   stages: tests, kernels (bf16 d=128 prefill and decode, then d=64), kernels-fp32, model
# Time limits (s): T_TESTS (200), T_KERNELS (70, each of its two runs), T_DECODE (30), T_FP32 (45), T_MODEL (110), T_MODEL_8B (70)
set -u
OUT=${OUT:-/tmp/gpu-out}
STAGES=${1:-tests,kernels,kernels-fp32,model}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
if [ -d .whl ]; then  # packages the machine's image lacks (pydantic, uvicorn, entmax, ...)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi; python3 -c "import torch, triton, transformers, sys
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__,
      'transformers', transformers.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))
for name in ('flash_attn', 'vllm', 'sglang'):
    try:
        print(name, __import__(name).__version__)
    except ImportError as e:
        print(name + ': not installed:', e)"; } > "$OUT/gpu_env.txt" 2>&1
kernels() {  # time limit, then gpu_kernels.py's arguments; all runs append to one file
  local limit=$1; shift
  timeout "$limit" python3 bench/gpu_kernels.py "$@" --out "$OUT/gpu_kernels.json" >> "$OUT/gpu_kernels.log" 2>&1
  echo "kernels ($*) exit $? after $SECONDS s" >> "$OUT/gpu_kernels.log"
}
if [[ ,$STAGES, == *,tests,* ]]; then
  PYTEST_STREAM="$OUT/gpu_tests_stream.log" PYTHONPATH=$PYTHONPATH:$PWD/bench timeout "${T_TESTS:-200}" \
    python3 -m pytest -p pytest_stream -n 14 -q -p no:cacheprovider -rfEs --tb=short --timeout 190 \
    tests/checkpoints/attention tests/checkpoints/test_engine.py tests/checkpoints/test_long_prefill.py tests/checkpoints/test_host_sync.py \
    > "$OUT/gpu_tests.log" 2>&1
  echo "pytest exit $? after $SECONDS s" >> "$OUT/gpu_tests.log"
fi
if [[ ,$STAGES, == *,kernels,* ]]; then
  kernels "${T_KERNELS:-70}" --dtypes bfloat16 --head-dims 128
  kernels "${T_KERNELS:-70}" --dtypes bfloat16 --head-dims 64 --no-decode
fi
if [[ ,$STAGES, == *,decode128k,* ]]; then
  kernels "${T_DECODE:-30}" --no-prefill --caches 131072
fi
if [[ ,$STAGES, == *,kernels-fp32,* ]]; then
  kernels "${T_FP32:-45}" --dtypes float32 --head-dims 128 --sizes 4096,16384 --variants softmax --no-decode
fi
if [[ ,$STAGES, == *,model,* ]]; then
  # the 1B and 135M shapes with decoding first, the 8B shape after them
  timeout "${T_MODEL:-110}" python3 bench/gpu_model.py --work /tmp/lctx-models --out "$OUT/gpu_model.json" \
    --shapes llama-3.2-1b,smollm2-135m > "$OUT/gpu_model.log" 2>&1
  echo "model (1B, 135M) exit $? after $SECONDS s" >> "$OUT/gpu_model.log"
  timeout "${T_MODEL_8B:-70}" python3 bench/gpu_model.py --work /tmp/lctx-models --out "$OUT/gpu_model.json" \
    --shapes llama-3.1-8b --decode-shapes "" >> "$OUT/gpu_model.log" 2>&1
  echo "model (8B) exit $? after $SECONDS s" >> "$OUT/gpu_model.log"
fi
echo "done after $SECONDS s"
