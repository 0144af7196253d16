#!/usr/bin/env bash
# The engine checks that need an NVIDIA GPU (issue 11), in about 5 minutes, with no internet.
#
#   scripts/gpu_check.sh            # after `make setup`; prints the figures, exits non-zero on a failure
#
# It needs the project's venv (`make setup`: torch, the SmolLM2 wheel) and, for each engine to
# check, an interpreter that imports it: VLLM_PYTHON / SGLANG_PYTHON, else any `python3` on PATH
# that imports `vllm` / `sglang`. An engine it does not find is reported as skipped, not failed.
# For each engine found:
#   1. `legorl bench engine --engine E --engine-python P`: throughput and engine-vs-trainer Pearson;
#   2. a 2-step training run of the demo config served by E (weights synced by disk each step):
#      per step the engine's weight version, logprob Pearson and mean |Δ| against the trainer.
# Then, with torch alone, GPU weight transfer of SmolLM2's state dict: NCCL broadcast between two
# processes when there are two GPUs; on one GPU (NCCL refuses two ranks on one device) the CUDA IPC
# path a colocated engine uses. With two GPUs, the FSDP2 trainer on 2 NCCL ranks against one process
# (issue 12; on one GPU it says it cannot). Results go to $OUT (default /tmp/legorl-gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
LEGORL=.venv/bin/legorl
OUT=${OUT:-/tmp/legorl-gpu-check}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
status=0

[ -x "$PY" ] || { echo "no .venv: run make setup first"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no NVIDIA GPU"; exit 2; }

find_python() { # $1: module, $2: explicit interpreter or empty
  for cand in "$2" python3 python3.12 python3.11 python3.10; do
    [ -n "$cand" ] || continue
    command -v "$cand" >/dev/null 2>&1 || [ -x "$cand" ] || continue
    if "$cand" -c "import $1" >/dev/null 2>&1; then command -v "$cand" || echo "$cand"; return 0; fi
  done
  return 1
}

report_run() { # $1: run dir
  "$PY" - "$1" <<'EOF'
import json, sys
from pathlib import Path
rows = [json.loads(l) for l in (Path(sys.argv[1]) / "metrics.jsonl").read_text().splitlines()]
for m in rows:
    print(f"  step {m['step']}: weight_version={m['weight_version']} pearson={m['mismatch/pearson']:.6f} "
          f"mean|Δ|={m['mismatch/mean_abs_diff']:.2e} tokens={m['mismatch/tokens']} updated={m['train/updated']}")
ok = [m["weight_version"] for m in rows] == [1, 2] and all(m["mismatch/pearson"] >= 0.999 for m in rows)
print("  PASS" if ok else "  FAIL: expected weight versions [1, 2] and pearson >= 0.999 on every step")
sys.exit(0 if ok else 1)
EOF
}

for engine in vllm sglang; do
  explicit_var=$(echo "${engine}_PYTHON" | tr a-z A-Z)
  if ! python=$(find_python "$engine" "${!explicit_var:-}"); then
    echo "== $engine: not installed (set $explicit_var to an interpreter with it): skipped"
    continue
  fi
  echo "== $engine ($python)"
  if timeout 300 "$LEGORL" bench engine --engine "$engine" --engine-python "$python" --repeats 2 --json \
      > "$OUT/bench-$engine.json" 2> "$OUT/bench-$engine.err"; then
    "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('  ' + ', '.join(f'{k}={d[k]}' for k in ('gen_tokens_per_s_1','gen_tokens_per_s_concurrent','batching_speedup','recompute_pearson','recompute_mean_abs_diff')))" "$OUT/bench-$engine.json"
  else
    echo "  bench FAILED: $(tail -3 "$OUT/bench-$engine.err")"; status=1
  fi
  run="$OUT/run-$engine"; rm -rf "$run"
  if timeout 900 "$LEGORL" train --config configs/demo.json --set "run_dir=$run" --set steps=2 \
      --set tasks_per_step=8 --set group_size=4 --set "engine.type=$engine" \
      --set "engine.${engine}_python=$python" --set engine.colocate_trainer=false \
      --set engine.max_model_len=2048 --set rollout.temperature=1.0 \
      --set eval.before=false --set eval.after=false > "$OUT/train-$engine.log" 2>&1; then
    report_run "$run" || status=1
  else
    echo "  2-step run FAILED: $(tail -5 "$OUT/train-$engine.log")"; status=1
  fi
done

echo "== GPU weight transfer (torch alone)"
timeout 300 "$PY" - <<'EOF' || status=1
import os, statistics, time
import torch, torch.distributed as dist, torch.multiprocessing as mp
from legorl.models.registry import load_model

def state():
    model = load_model("smollm2-135m", dtype=torch.bfloat16)
    return {k: v.detach().cuda(0) for k, v in model.state_dict().items()}

def nccl_rank(rank, port, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    sd = state()  # rank 1 only takes the shapes; its values are overwritten by the broadcast
    bufs = [v.to(f"cuda:{rank}") if rank == 0 else torch.zeros_like(v, device=f"cuda:{rank}") for v in sd.values()]
    times = []
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for b in bufs:
            dist.broadcast(b, src=0)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if rank == 1:
        q.put((sum(b.numel() * b.element_size() for b in bufs), statistics.median(times), float(sum(b.float().sum() for b in bufs))))
    dist.destroy_process_group()


def ipc_receiver(q_in, q_out):
    handles = q_in.get()
    t0 = time.perf_counter()
    total = sum(float(t.float().sum()) for t in handles.values())
    q_out.put((time.perf_counter() - t0, total, sum(t.numel() * t.element_size() for t in handles.values())))

if __name__ == "__main__":
    mp.set_start_method("spawn")
    n = torch.cuda.device_count()
    if n >= 2:
        q = mp.get_context("spawn").Queue()
        mp.spawn(nccl_rank, args=(29517, q), nprocs=2)
        size, secs, checksum = q.get()
        expect = float(sum(v.float().sum() for v in state().values()))
        ok = abs(checksum - expect) <= 1e-3 * abs(expect)
        print(f"  NCCL broadcast: {size / 1e6:.0f} MB in {secs * 1e3:.1f} ms ({size / secs / 1e9:.1f} GB/s), checksum {'ok' if ok else 'MISMATCH'}")
    else:
        sd = state()
        expect = float(sum(v.float().sum() for v in sd.values()))
        ctx = mp.get_context("spawn"); q_in, q_out = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=ipc_receiver, args=(q_in, q_out)); p.start()
        t0 = time.perf_counter(); q_in.put(sd)
        secs, total, size = q_out.get(); p.join()
        ok = abs(total - expect) <= 1e-3 * abs(expect)
        print(f"  one GPU: NCCL needs a device per rank; CUDA IPC share of {size / 1e6:.0f} MB: "
              f"{(time.perf_counter() - t0) * 1e3:.0f} ms end to end, checksum {'ok' if ok else 'MISMATCH'}")
    raise SystemExit(0 if ok else 1)
EOF
echo "== FSDP2 trainer on 2 GPU ranks (NCCL)"
gpus=$(nvidia-smi -L | wc -l)
if [ "$gpus" -ge 2 ]; then
  # the CI check of tests/training/test_fsdp.py, on GPUs: the sharded step against one process's
  fsdp_out="$OUT/fsdp"; rm -rf "$fsdp_out"; mkdir -p "$fsdp_out"
  if (cd tests/training && timeout 600 "../../$PY" -m torch.distributed.run --nproc-per-node 2 \
        fsdp_worker.py train "$fsdp_out" --device cuda) > "$OUT/fsdp.log" 2>&1; then
    "$PY" - "$fsdp_out/result-train.json" <<'EOF' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
first = max(r["relative_gradient_diff"][0].values())
print(f"  first optimiser step, worst per-tensor ||dg||/||g||: {first:.2e} (target <= 1e-5); "
      f"loss single {r['loss'][0]:.6f} vs sharded {r['loss'][1]:.6f}")
raise SystemExit(0 if first <= 1e-5 else 1)
EOF
  else
    echo "  FSDP2 FAILED: $(tail -5 "$OUT/fsdp.log")"; status=1
  fi
else
  echo "  $gpus GPU here: 2 FSDP ranks need 2 GPUs (NCCL: one device per rank); not verifiable on this machine"
fi
echo "== done (status $status); outputs in $OUT"
exit $status
