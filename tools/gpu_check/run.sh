#!/usr/bin/env bash
# The device check, run from the repository root on a machine with one NVIDIA GPU:
#   OUT=dir GPU=h200-sxm-141gb tools/gpu_check/run.sh
# It needs the hetplan wheel for the machine's Python in .whl/ (README.md beside this). What it
# writes under $OUT is committed under data/measured/<gpu>/ and read by docs/validation.md §5.
# The timeouts add up to 570 s, inside a lent machine's 600 s a call.
set -u
: "${OUT:?set OUT to the folder to write}" "${GPU:?set GPU to the hetplan name of this GPU type}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
log="$OUT/log.txt"
# At most 8 files come back from the lent machines: nvidia-smi goes into the log.
nvidia-smi >"$log" 2>&1
python3 -c 'import hetplan, torch; print("hetplan", hetplan.__file__, "torch", torch.__version__)' >>"$log" 2>&1
timeout 100 python3 tools/gpu_check/kernels.py >"$OUT/kernels.json" 2>>"$log"
echo "kernels: exit $?" >>"$log"
timeout 150 python3 tools/gpu_check/steps.py --gpu "$GPU" >"$OUT/steps.jsonl" 2>>"$log"
echo "steps: exit $?" >>"$log"
timeout 120 python3 tools/gpu_check/fsdp_step.py --model llama2-7b --seq-len 2048 --mbs 1 \
  >"$OUT/fsdp_step.jsonl" 2>>"$log"
echo "fsdp_step: exit $?" >>"$log"
timeout 50 python3 -m hetplan.profile --model gpt3-1.3b --gpu "$GPU" --seq-len 2048 --mbs 8,16 \
  --out "$OUT/profile-gpt3-1.3b.json" >>"$log" 2>&1
echo "profile gpt3-1.3b: exit $?" >>"$log"
timeout 50 python3 -m hetplan.profile --model llama2-7b --gpu "$GPU" --seq-len 2048 --mbs 1,2,4 \
  --out "$OUT/profile-llama2-7b.json" >>"$log" 2>&1
echo "profile llama2-7b: exit $?" >>"$log"
timeout 50 python3 -m hetplan.profile --model llama3-8b --gpu "$GPU" --seq-len 4096 --mbs 1,2,4 \
  --out "$OUT/profile-llama3-8b.json" >>"$log" 2>&1
echo "profile llama3-8b: exit $?" >>"$log"
timeout 50 python3 -m hetplan.profile --model llama3-70b --gpu "$GPU" --seq-len 4096 --mbs 1,2 \
  --out "$OUT/profile-llama3-70b.json" >>"$log" 2>&1
echo "profile llama3-70b: exit $?" >>"$log"
cat "$log"
