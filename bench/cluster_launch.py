"""What a thread-block cluster costs on its own, under the graph-replay protocol of the
RMSNorm benchmark: kernels that move no data, launched with ``__cluster_dims__`` of 1, 2, 4
and 8 blocks, for one row's worth of blocks (one cluster) and for 16 rows (16 clusters).

Three bodies, each a stage of the RMSNorm kernel's cluster exchange (``kernels/rmsnorm/rmsnorm.cu``):

``empty``
    nothing: the cost of launching and retiring clusters;
``barrier``
    one cluster barrier (arrive, then wait) — ``__syncthreads`` for a cluster of 1;
``exchange``
    the exchange the kernel does: a partial sum in shared memory, a barrier, a read of every
    block's partial through distributed shared memory, and the second barrier that keeps a
    block's shared memory alive until all have read it.

Run on the GPU machine from ``bench/``:

    python cluster_launch.py --out results/cluster-launch-h200.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _common import machine

from flyconfigs.gpu import CompileRequest, get_backend
from flyconfigs.tuner.timing import TimingPlan, measure, summarize

SOURCE = r"""
#if FC_CLUSTER > 1
#define FC_DIMS __cluster_dims__(FC_CLUSTER, 1, 1)
__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive;" ::: "memory"); }
__device__ __forceinline__ void wait() { asm volatile("barrier.cluster.wait;" ::: "memory"); }
__device__ __forceinline__ float remote(const float* local, unsigned int rank) {
  unsigned int addr = (unsigned int)__cvta_generic_to_shared(local), far;
  float value;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(far) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(far) : "memory");
  return value;
}
#else
#define FC_DIMS
__device__ __forceinline__ void arrive() {}
__device__ __forceinline__ void wait() { __syncthreads(); }
__device__ __forceinline__ float remote(const float* local, unsigned int) { return *local; }
#endif

extern "C" __global__ void FC_DIMS probe(float* sink) {
#if FC_BODY == 1
  arrive();
  wait();
#elif FC_BODY == 2
  __shared__ float partial;
  if (threadIdx.x == 0) partial = (float)blockIdx.x;
  arrive();
  wait();
  float sum = 0.f;
  for (int r = 0; r < (FC_CLUSTER > 1 ? FC_CLUSTER : 1); ++r) sum += remote(&partial, (unsigned int)r);
  arrive();
  if (threadIdx.x == 0 && sum < 0.f) *sink = sum;  // never true: keeps the reads
  wait();
#endif
}
"""
BODIES = {"empty": 0, "barrier": 1, "exchange": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=128, help="threads per block")
    parser.add_argument("--samples", type=int, default=25)
    args = parser.parse_args()
    backend = get_backend()
    sink = torch.zeros(1, device="cuda")
    address = sink.data_ptr()
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    names, runs = [], []
    for body, code in BODIES.items():
        for cluster in (1, 2, 4, 8):
            compiled = backend.compile(CompileRequest(SOURCE, "probe", (f"-DFC_CLUSTER={cluster}", f"-DFC_BODY={code}")))
            kernel = backend.load(compiled, ("ptr",))
            for rows in (1, 16):
                launch = kernel.prepare((rows * cluster, 1, 1), (args.threads, 1, 1))
                names.append({"body": body, "cluster": cluster, "rows": rows, "blocks": rows * cluster})
                runs.append(lambda i, launch=launch: launch((address,), stream()))
    started = time.time()
    results = measure(runs, TimingPlan(copies=1, launches=200, samples=args.samples))
    rows = [{**name, **summarize(r, 0)} for name, r in zip(names, results, strict=True)]
    for row in rows:
        row.pop("bandwidth_gbps")
        print(f"{row['body']:>8} cluster {row['cluster']} x {row['rows']:>2} clusters: {row['median_us']:.3f} us", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "cluster-launch", "machine": machine(), "device": backend.device().model_dump(mode="json"),
        "protocol": "200 launches captured in one graph, replays interleaved across variants; per-launch = replay / 200; "
                    "median of samples", "threads_per_block": args.threads, "wall_s": time.time() - started,
        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
