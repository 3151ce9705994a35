#!/usr/bin/env bash
# Issue #41 on a lent GPU machine, each stage under its own time limit, every output written
# to $OUT as it comes (a stage cut short keeps what it measured; each test's outcome is
# streamed to gpu_tests_stream.log by bench/pytest_stream.py). bench/gpu_report.py turns the
# folders into bench/results/gpu_*.
# Usage (repo root, on the device): OUT=/some/dir bash bench/gpu_run.sh STAGE[,STAGE...]
#   tests      the CUDA-only tests of CUDA graphs and host syncs (tests/checkpoints/engine/test_cuda_graphs.py, tests/checkpoints/test_hostsync.py;
#              the rest of those files runs Triton's interpreter on the CPU, in CI)
#   eval       `lctx eval` RULER niah_single_1 as whole commands: 16k x 32 and 128k x 4 (cold, warm;
#              EVAL_MODES) against a bare import, 16k eager (EVAL_EAGER=0: not), then two identical
#              16k jobs on one loaded model (a warm worker's second job; EVAL_WARM_JOB=0: not);
#              EVAL_HF=1 adds transformers' generate; EVAL_MODES=cold,warm,lookup adds a run with
#              prompt lookup on (`--draft-tokens`; off by default on Triton until this measures it)
#   decode     1B decode at batch 8 and 32 over 4k and 32k caches: graphs, eager, transformers
#   prefill    1B prefill at 32k and 128k per chunk size against transformers SDPA
#   prefill8b  the 8B shape at 32k and 128k
#   profile    torch.profiler of a 32k prefill and of decode steps (1B)
#   kernels    the attention kernels against SDPA (bench/gpu_kernels.py, issue #30)
#   (EVAL_LCTX=0 EVAL_HF=1 LENGTHS_FROM=an earlier gpu_eval.json: transformers alone on the prompt lengths it had)
# Time limits (s): T_TESTS 80, T_EVAL 170, T_EVAL_HF 130, T_DECODE 70, T_PREFILL 80, T_PREFILL_8B 150, T_PROFILE 45
set -u
OUT=${OUT:-/tmp/gpu-out}
STAGES=${1:-tests,eval,decode,prefill,profile}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
if [ -d .whl ]; then  # packages the machine's image lacks (pydantic, fastapi, uvicorn, entmax, wonderwords)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
export TRITON_CACHE_DIR=/tmp/lctx-home/triton  # one cache for every stage: compiled once per machine
MODELS=/tmp/lctx-models
TOKENIZER=${TOKENIZER:-.gpu/smollm2-tokenizer}
{ date -u; nvidia-smi; python3 -c "import torch, triton, transformers, sys
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__,
      'transformers', transformers.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))"; } \
  > "$OUT/gpu_env.txt" 2>&1
has() { [[ ,$STAGES, == *,$1,* ]]; }
LOG=$OUT/gpu_logs.txt  # every stage's output in one file (8 files at most come back from the machine)
stamp() { echo "=== $1 exit $2 after $SECONDS s" | tee -a "$LOG"; }
if has tests; then
  PYTEST_STREAM="$OUT/gpu_tests_stream.log" PYTHONPATH=$PYTHONPATH:$PWD/bench timeout "${T_TESTS:-80}" \
    python3 -m pytest -p pytest_stream -n 6 -q -p no:cacheprovider -rfEs --tb=short --timeout 70 \
    -k "cuda or replay or graphed" tests/checkpoints/engine/test_cuda_graphs.py tests/checkpoints/test_hostsync.py \
    >> "$LOG" 2>&1
  stamp tests $?
fi
if has eval; then
  eval_bench() { python3 bench/gpu_eval.py --tokenizer "$TOKENIZER" --work /tmp/lctx-eval --out "$OUT/gpu_eval.json" "$@"; }
  export -f eval_bench; export TOKENIZER OUT
  [ "${EVAL_LCTX:-1}" = 1 ] && timeout "${T_EVAL:-170}" bash -c "eval_bench --runs 16384:32,131072:4 \
      --modes ${EVAL_MODES:-cold,warm} --bare ${EVAL_BARE:-2} &&
    if [ ${EVAL_EAGER:-1} = 1 ]; then eval_bench --runs 16384:32 --modes eager --bare 0; fi &&
    if [ ${EVAL_WARM_JOB:-1} = 1 ]; then eval_bench --runs 16384:32 --modes '' --bare 0 --warm-job 16384:32; fi" \
    >> "$LOG" 2>&1
  stamp eval $?
  if [ "${EVAL_HF:-0}" = 1 ]; then
    timeout "${T_EVAL_HF:-130}" python3 bench/gpu_eval.py --tokenizer "$TOKENIZER" --work /tmp/lctx-eval \
      --out "$OUT/gpu_eval.json" --runs 16384:32,131072:4 --modes "" --transformers 16384:16,131072:1 --bare 0 \
      ${LENGTHS_FROM:+--lengths-from "$LENGTHS_FROM"} \
      >> "$LOG" 2>&1
    stamp eval-transformers $?
  fi
fi
if has decode; then
  timeout "${T_DECODE:-70}" python3 bench/gpu_model.py --work $MODELS --out "$OUT/gpu_model.json" \
    --shapes llama-3.2-1b --parts decode --decode-shapes llama-3.2-1b >> "$LOG" 2>&1
  stamp decode $?
fi
if has prefill; then
  timeout "${T_PREFILL:-80}" python3 bench/gpu_model.py --work $MODELS --out "$OUT/gpu_model.json" \
    --shapes llama-3.2-1b --parts prefill --decode-shapes "" >> "$LOG" 2>&1
  stamp prefill $?
fi
if has prefill8b; then
  timeout "${T_PREFILL_8B:-150}" python3 bench/gpu_model.py --work $MODELS --out "$OUT/gpu_model.json" \
    --shapes llama-3.1-8b --parts prefill --decode-shapes "" --chunks "${CHUNKS_8B:-16384}" \
    --lengths "${LENGTHS_8B:-32768,131072}" \
    >> "$LOG" 2>&1
  stamp prefill8b $?
fi
if has profile; then
  [ -f $MODELS/llama-3.2-1b/config.json ] || python3 -c "import sys; sys.path[:0] = ['bench', '.']
from gpu_model import build; build('llama-3.2-1b', __import__('pathlib').Path('$MODELS/llama-3.2-1b'), 'cuda')"
  timeout "${T_PROFILE:-45}" python3 bench/gpu_profile.py --checkpoint $MODELS/llama-3.2-1b --out "$OUT/gpu_profile.txt" \
    >> "$LOG" 2>&1
  stamp profile $?
fi
if has kernels; then
  timeout "${T_KERNELS:-70}" python3 bench/gpu_kernels.py --dtypes bfloat16 --head-dims 128 --out "$OUT/gpu_kernels.json" \
    >> "$LOG" 2>&1
  stamp kernels $?
fi
echo "done after $SECONDS s"
