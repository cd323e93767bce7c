// flyconfigs RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w over each row, fp32 accumulation.
// One source for hipRTC (AMD, -DFLYCONFIGS_HIP) and NVRTC (NVIDIA, -DFLYCONFIGS_CUDA).
//
// Specialised at compile time (see flyconfigs/kernels/rmsnorm/declaration.py):
//   FC_N          row length (the loops unroll over it)
//   FC_X_DTYPE    activations: 0 fp32, 1 fp16, 2 bf16     FC_W_DTYPE  the weight, likewise
//   FC_THREADS    threads per row (a sub-wave, a wave, or several waves)
//   FC_ROWS       rows per block
//   FC_VEC_BYTES  bytes per load/store of x and y: 16, 8, 4, or 0 for scalar accesses
//   FC_STORAGE    where the row waits for the reduction: 0 registers (x and w both loaded up
//                 front, held as raw words), 1 shared memory, 2 re-read
//   FC_OCCUPANCY  0, or minimum blocks per SM (CUDA) / waves per EU (AMD)
//   FC_CLUSTER    blocks sharing one row: 1, or (CUDA sm90+) a thread-block cluster of 2, 4
//                 or 8 whose blocks each take one contiguous slice of the row; each block
//                 stores its partial sum into every block's shared memory (distributed
//                 shared memory) with an asynchronous store that counts its bytes on
//                 that block's mbarrier; a block goes on once its barrier has them all
//   FC_WAVE       the wave (warp) width: 32 or 64
//   FC_RESIDUAL   1: the fused residual add (fused_add_rmsnorm_kernel): residual += x, the
//                 sum rounded to the activation dtype and stored, then normalized as x
//                 is otherwise (flyconfigs/kernels/fused_add_rmsnorm/declaration.py);
//                 0 or undefined: rmsnorm_kernel
//
// The host guarantees for FC_VEC_BYTES > 0 that the row length, the row strides and the
// base pointers are multiples of the vector; otherwise it compiles the scalar variant.

#if defined(FLYCONFIGS_HIP)
#define FC_SHFL_XOR(v, m) __shfl_xor((v), (m))
#define FC_BITS_TO_FLOAT(u) __builtin_bit_cast(float, (unsigned int)(u))
#define FC_FLOAT_TO_BITS(f) __builtin_bit_cast(unsigned int, (float)(f))
#else
#include <cuda_fp16.h>
#define FC_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define FC_BITS_TO_FLOAT(u) __uint_as_float((unsigned int)(u))
#define FC_FLOAT_TO_BITS(f) __float_as_uint((float)(f))
#endif

namespace fc {

constexpr int N = FC_N;
constexpr int TPR = FC_THREADS;
constexpr int ROWS = FC_ROWS;
constexpr int BLOCK = TPR * ROWS;
constexpr int WAVE = FC_WAVE;
constexpr int XBYTES = FC_X_DTYPE == 0 ? 4 : 2;
constexpr int WBYTES = FC_W_DTYPE == 0 ? 4 : 2;
constexpr int VEC = FC_VEC_BYTES > 0 ? FC_VEC_BYTES / XBYTES : 1;
constexpr int NV = (N + VEC - 1) / VEC;  // vectors per row (exact when VEC > 1)
constexpr int CLUSTER = FC_CLUSTER;
constexpr int SLICE = (NV + CLUSTER - 1) / CLUSTER;  // vectors per block of the row's cluster
constexpr int ITEMS = (SLICE + TPR - 1) / TPR;  // vectors per thread
constexpr int WAVES_PER_ROW = TPR > WAVE ? TPR / WAVE : 1;
#ifndef FC_CACHE
#define FC_CACHE 0
#endif
#ifndef FC_RESIDUAL
#define FC_RESIDUAL 0
#endif
// Cache hints (FC_CACHE bits): 1 the last read of x evicts first, 2 the first of reread's
// two reads keeps x in L2 (evict last), 4 y is stored streaming, 8 w stays in L2.
// Enumerators, not constexpr variables: those would add symbols to every cubin.
enum : int { HINT_NONE = 0, HINT_FIRST = 1, HINT_LAST = 2 };
enum : int {
  X_LAST_READ = FC_CACHE & 1 ? HINT_FIRST : HINT_NONE,
  X_FIRST_READ = FC_STORAGE == 2 ? (FC_CACHE & 2 ? HINT_LAST : HINT_NONE) : X_LAST_READ,
  Y_STREAM = (FC_CACHE & 4) ? 1 : 0,
  W_READ = FC_CACHE & 8 ? HINT_LAST : HINT_NONE,
};

// What the validity rules read besides the quantities above, named as the declaration
// names them (enumerators too: no symbols).
#if defined(FLYCONFIGS_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FC_MAX_CLUSTER 8
#else
#define FC_MAX_CLUSTER 1
#endif
#if defined(FLYCONFIGS_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FC_HINTS_OK 1
#else
#define FC_HINTS_OK 0
#endif
enum : int {
  VEC_BYTES = FC_VEC_BYTES,
  CACHE = FC_CACHE,
  MAX_BLOCK = 1024,
  MAX_CLUSTER = FC_MAX_CLUSTER,
  HINTS_OK = FC_HINTS_OK,
};
// Every rule the source relies on at compile time is stated once, in
// flyconfigs/kernels/rmsnorm/validity.py, which the declaration's check evaluates; the
// asserted ones are put here as static_asserts when the source is read.
// @rules

// Raw words of a load: 16-bit elements sit two to a 32-bit word, low half first.
template <int BYTES>
struct alignas(BYTES >= 16 ? 16 : BYTES) Words {
  unsigned int w[BYTES >= 4 ? BYTES / 4 : 1];
};

__device__ __forceinline__ float half_to_float(unsigned int h) {
#if defined(FLYCONFIGS_HIP)
  unsigned short s = (unsigned short)h;
  return (float)__builtin_bit_cast(_Float16, s);
#else
  return __half2float(__ushort_as_half((unsigned short)h));
#endif
}

__device__ __forceinline__ unsigned int float_to_half(float f) {
#if defined(FLYCONFIGS_HIP)
  return (unsigned int)__builtin_bit_cast(unsigned short, (_Float16)f);
#else
  return (unsigned int)__half_as_ushort(__float2half_rn(f));
#endif
}

__device__ __forceinline__ float bf16_to_float(unsigned int h) { return FC_BITS_TO_FLOAT(h << 16); }

__device__ __forceinline__ unsigned int float_to_bf16(float f) {
  unsigned int u = FC_FLOAT_TO_BITS(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                       // round to nearest even
  return u >> 16;
}

template <int DT>
__device__ __forceinline__ float to_float(unsigned int bits) {
  if (DT == 0) return FC_BITS_TO_FLOAT(bits);
  if (DT == 1) return half_to_float(bits);
  return bf16_to_float(bits);
}

template <int DT>
__device__ __forceinline__ unsigned int from_float(float f) {
  if (DT == 0) return FC_FLOAT_TO_BITS(f);
  if (DT == 1) return float_to_half(f);
  return float_to_bf16(f);
}

// The L2 eviction policy of HINT (sm80+): created once per thread and handed to every
// hinted load; 0 (and no instruction) for HINT_NONE.
template <int HINT>
__device__ __forceinline__ unsigned long long cache_policy() {
  unsigned long long policy = 0;
#if defined(FLYCONFIGS_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (HINT == HINT_FIRST) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  } else if constexpr (HINT == HINT_LAST) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  }
#endif
  return policy;
}

// One CHUNK-byte global load under `policy` (see cache_policy) when HINT is set on CUDA;
// HINT_NONE and other builds load plainly.
template <int CHUNK, int HINT>
__device__ __forceinline__ Words<CHUNK> load_chunk(const void* p, unsigned long long policy) {
#if defined(FLYCONFIGS_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (HINT != HINT_NONE && CHUNK >= 4) {
    Words<CHUNK> v;
    if constexpr (CHUNK == 16) {
      asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
          : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3]) : "l"(p), "l"(policy));
    } else if constexpr (CHUNK == 8) {
      asm("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.w[0]), "=r"(v.w[1]) : "l"(p), "l"(policy));
    } else {
      asm("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v.w[0]) : "l"(p), "l"(policy));
    }
    return v;
  }
#endif
  (void)policy;
  return *reinterpret_cast<const Words<CHUNK>*>(p);
}

// One CHUNK-byte global store, streamed (evicted first) when STREAM on CUDA.
template <int CHUNK, int STREAM>
__device__ __forceinline__ void store_chunk(void* p, const Words<CHUNK>& v) {
#if defined(FLYCONFIGS_CUDA)
  if constexpr (STREAM && CHUNK >= 4) {
    if constexpr (CHUNK == 16) {
      asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]),
                   "r"(v.w[3]) : "memory");
    } else if constexpr (CHUNK == 8) {
      asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]) : "memory");
    } else {
      asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(v.w[0]) : "memory");
    }
    return;
  }
#endif
  *reinterpret_cast<Words<CHUNK>*>(p) = v;
}

// Load COUNT consecutive elements of dtype DT starting at p into out[] as floats, with
// the widest accesses the alignment guaranteed by the caller allows.
template <int DT, int COUNT, int HINT = HINT_NONE>
__device__ __forceinline__ void load(const void* p, float* out, unsigned long long policy = 0) {
  constexpr int EB = DT == 0 ? 4 : 2;
  constexpr int BYTES = EB * COUNT;
  if (BYTES >= 4 && BYTES % 4 == 0) {
    constexpr int CHUNK = BYTES % 16 == 0 ? 16 : BYTES % 8 == 0 ? 8 : 4;
    constexpr int PER = CHUNK / EB;
#pragma unroll
    for (int c = 0; c < BYTES / CHUNK; ++c) {
      Words<CHUNK> v = load_chunk<CHUNK, HINT>(reinterpret_cast<const char*>(p) + c * CHUNK, policy);
#pragma unroll
      for (int e = 0; e < PER; ++e) {
        unsigned int word = v.w[(e * EB) / 4];
        unsigned int bits = EB == 4 ? word : (e & 1 ? word >> 16 : word & 0xffffu);
        out[c * PER + e] = to_float<DT>(bits);
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < COUNT; ++e) {
      unsigned int bits = EB == 4 ? reinterpret_cast<const unsigned int*>(p)[e]
                                  : (unsigned int)reinterpret_cast<const unsigned short*>(p)[e];
      out[e] = to_float<DT>(bits);
    }
  }
}

// Two 16-bit results packed into one word, low half first: one conversion instruction on
// NVIDIA sm80+, where bf16 rounding otherwise costs several integer operations an element.
template <int DT>
__device__ __forceinline__ unsigned int pack_pair(float lo, float hi) {
#if defined(FLYCONFIGS_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned int packed;
  if constexpr (DT == 2) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
    return packed;
  } else if constexpr (DT == 1) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
    return packed;
  }
#endif
  return from_float<DT>(lo) | (from_float<DT>(hi) << 16);
}

template <int DT, int COUNT, int STREAM = 0>
__device__ __forceinline__ void store(void* p, const float* in) {
  constexpr int EB = DT == 0 ? 4 : 2;
  constexpr int BYTES = EB * COUNT;
  if (BYTES >= 4 && BYTES % 4 == 0) {
    constexpr int CHUNK = BYTES % 16 == 0 ? 16 : BYTES % 8 == 0 ? 8 : 4;
    constexpr int PER = CHUNK / EB;
#pragma unroll
    for (int c = 0; c < BYTES / CHUNK; ++c) {
      Words<CHUNK> v;
#pragma unroll
      for (int k = 0; k < CHUNK / 4; ++k) {
        v.w[k] = EB == 4 ? from_float<DT>(in[c * PER + k]) : pack_pair<DT>(in[c * PER + 2 * k], in[c * PER + 2 * k + 1]);
      }
      store_chunk<CHUNK, STREAM>(reinterpret_cast<char*>(p) + c * CHUNK, v);
    }
  } else {
#pragma unroll
    for (int e = 0; e < COUNT; ++e) {
      unsigned int bits = from_float<DT>(in[e]);
      if (EB == 4) reinterpret_cast<unsigned int*>(p)[e] = bits;
      else reinterpret_cast<unsigned short*>(p)[e] = (unsigned short)bits;
    }
  }
}


// Raw loads: BYTES bytes into 32-bit words (16-bit elements two to a word, low half
// first), in the widest accesses the caller's alignment allows.  Holding rows as raw
// words halves the registers 16-bit rows need, so x and w can both be loaded up front.
template <int BYTES, int HINT = HINT_NONE>
__device__ __forceinline__ void load_words(const void* p, unsigned int* out, unsigned long long policy = 0) {
  if (BYTES % 16 == 0) {
#pragma unroll
    for (int c = 0; c < BYTES / 16; ++c) {
      Words<16> v = load_chunk<16, HINT>(reinterpret_cast<const char*>(p) + c * 16, policy);
#pragma unroll
      for (int k = 0; k < 4; ++k) out[c * 4 + k] = v.w[k];
    }
  } else if (BYTES % 8 == 0) {
#pragma unroll
    for (int c = 0; c < BYTES / 8; ++c) {
      Words<8> v = load_chunk<8, HINT>(reinterpret_cast<const char*>(p) + c * 8, policy);
      out[c * 2] = v.w[0];
      out[c * 2 + 1] = v.w[1];
    }
  } else if (BYTES % 4 == 0) {
#pragma unroll
    for (int c = 0; c < BYTES / 4; ++c) out[c] = load_chunk<4, HINT>(reinterpret_cast<const char*>(p) + c * 4, policy).w[0];
  } else {
    out[0] = (unsigned int)reinterpret_cast<const unsigned short*>(p)[0];
  }
}

template <int DT>
__device__ __forceinline__ float word_element(const unsigned int* words, int e) {
  if (DT == 0) return FC_BITS_TO_FLOAT(words[e]);
  unsigned int bits = (e & 1) ? (words[e >> 1] >> 16) : (words[e >> 1] & 0xffffu);
  return to_float<DT>(bits);
}

// Raw stores, the inverse of load_words.
template <int BYTES>
__device__ __forceinline__ void store_words(void* p, const unsigned int* in) {
  if (BYTES % 16 == 0) {
#pragma unroll
    for (int c = 0; c < BYTES / 16; ++c) {
      Words<16> v;
#pragma unroll
      for (int k = 0; k < 4; ++k) v.w[k] = in[c * 4 + k];
      store_chunk<16, 0>(reinterpret_cast<char*>(p) + c * 16, v);
    }
  } else if (BYTES % 8 == 0) {
#pragma unroll
    for (int c = 0; c < BYTES / 8; ++c) {
      Words<8> v;
      v.w[0] = in[c * 2];
      v.w[1] = in[c * 2 + 1];
      store_chunk<8, 0>(reinterpret_cast<char*>(p) + c * 8, v);
    }
  } else if (BYTES % 4 == 0) {
#pragma unroll
    for (int c = 0; c < BYTES / 4; ++c) reinterpret_cast<unsigned int*>(p)[c] = in[c];
  } else {
    reinterpret_cast<unsigned short*>(p)[0] = (unsigned short)in[0];
  }
}

// COUNT floats as raw words of dtype DT (16-bit elements two to a word, low half first).
template <int DT, int COUNT>
__device__ __forceinline__ void pack_words(const float* in, unsigned int* out) {
  if (DT == 0) {
#pragma unroll
    for (int e = 0; e < COUNT; ++e) out[e] = FC_FLOAT_TO_BITS(in[e]);
  } else if (COUNT == 1) {
    out[0] = from_float<DT>(in[0]);
  } else {
#pragma unroll
    for (int k = 0; k < COUNT / 2; ++k) out[k] = pack_pair<DT>(in[2 * k], in[2 * k + 1]);
  }
}

template <int BYTES>
struct WordsFor {
  static constexpr int value = BYTES >= 4 ? BYTES / 4 : 1;
};

#if FC_CLUSTER > 1
// Distributed shared memory across the blocks of one cluster (sm90).
// The same variable of block `rank` and its mbarrier at `bar` (both local shared-memory
// addresses) as addresses in the cluster's shared memory: `value` is stored there
// asynchronously and its 4 bytes counted on that block's barrier (PTX ISA 8.1+, sm90).
__device__ __forceinline__ void cluster_store_counted(float* local, unsigned int bar, unsigned int rank, float value) {
  unsigned int addr = (unsigned int)__cvta_generic_to_shared(local), remote, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(bar), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote),
               "r"(__float_as_uint(value)), "r"(remote_bar) : "memory");
}
// Thread 0 sets up this block's barrier to expect `bytes` and makes that visible to the
// cluster before the block arrives at the cluster barrier.
__device__ __forceinline__ void expect_bytes(unsigned int bar, unsigned int bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Until the barrier's first phase completes: every expected byte has landed.
__device__ __forceinline__ void wait_bytes(unsigned int bar) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n @!done bra WAIT;\n}" ::"r"(bar)
      : "memory");
}
// Every thread of every block of the cluster arrives before any proceeds past the
// matching wait; relaxed: it orders no memory.
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait;" ::: "memory"); }
#endif

}  // namespace fc

#if FC_CLUSTER > 1
#define FC_CLUSTER_DIMS __cluster_dims__(FC_CLUSTER, 1, 1)
#else
#define FC_CLUSTER_DIMS
#endif

#if defined(FLYCONFIGS_HIP)
#if FC_OCCUPANCY > 0
#define FC_BOUNDS __attribute__((amdgpu_flat_work_group_size(1, fc::BLOCK), amdgpu_waves_per_eu(FC_OCCUPANCY)))
#else
#define FC_BOUNDS __attribute__((amdgpu_flat_work_group_size(1, fc::BLOCK)))
#endif
#else
#if FC_OCCUPANCY > 0
#define FC_BOUNDS __launch_bounds__(fc::BLOCK, FC_OCCUPANCY)
#else
#define FC_BOUNDS __launch_bounds__(fc::BLOCK)
#endif
#endif

#if FC_RESIDUAL
// x may be the residual itself: each element is read before it is written, by one thread.
extern "C" __global__ void FC_BOUNDS FC_CLUSTER_DIMS fused_add_rmsnorm_kernel(const void* x, void* residual,
                                                    const void* __restrict__ w, void* __restrict__ y, int rows,
                                                    long long x_stride, long long r_stride, long long y_stride,
                                                    float eps) {
#else
extern "C" __global__ void FC_BOUNDS FC_CLUSTER_DIMS rmsnorm_kernel(const void* __restrict__ x, const void* __restrict__ w,
                                                    void* __restrict__ y, int rows, long long x_stride,
                                                    long long y_stride, float eps) {
#endif
  using namespace fc;
  const int lane = (int)threadIdx.x % TPR;
  const int sub = (int)threadIdx.x / TPR;
  // A cluster's blocks are consecutive in x; its rank is the slice of the row it takes.
  const long long row = (long long)(blockIdx.x / CLUSTER) * ROWS + sub;
  const int first = CLUSTER > 1 ? (int)(blockIdx.x % CLUSTER) * SLICE : 0;
  const bool active = row < rows;
#if FC_CLUSTER > 1
  // Every block's partial of this block's rows lands here, counted on `exchange_bar`.
  __shared__ float cluster_partial[CLUSTER * ROWS];
  __shared__ alignas(8) unsigned long long exchange_bar;
  const unsigned int bar = (unsigned int)__cvta_generic_to_shared(&exchange_bar);
  if (threadIdx.x == 0) expect_bytes(bar, (unsigned int)(CLUSTER * ROWS * sizeof(float)));
  // Begun now, waited on before the first store into another block: by then every block
  // of the cluster has started and set up its barrier.
  cluster_arrive_relaxed();
#endif
  const unsigned long long x_last_policy = cache_policy<X_LAST_READ>();
  const unsigned long long x_first_policy = X_FIRST_READ == X_LAST_READ ? x_last_policy : cache_policy<X_FIRST_READ>();
  const unsigned long long w_policy = cache_policy<W_READ>();
  const char* xr = reinterpret_cast<const char*>(x) + (active ? row : 0) * x_stride * XBYTES;
  char* yr = reinterpret_cast<char*>(y) + (active ? row : 0) * y_stride * XBYTES;
#if FC_RESIDUAL
  char* rr = reinterpret_cast<char*>(residual) + (active ? row : 0) * r_stride * XBYTES;
#endif

#if FC_STORAGE == 0
  constexpr int XW = WordsFor<VEC * XBYTES>::value;
  constexpr int WW = WordsFor<VEC * WBYTES>::value;
  unsigned int xraw[ITEMS][XW];
  unsigned int wraw[ITEMS][WW];
#elif FC_STORAGE == 1
  __shared__ float held_rows[ROWS * SLICE * VEC];
  float* held = held_rows + sub * SLICE * VEC;
#endif

  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int local = lane + i * TPR;
    const int v = first + local;
    const bool in_row = active && local < SLICE && v < NV;
#if FC_STORAGE == 0
    if (in_row) {
      load_words<VEC * XBYTES, X_LAST_READ>(xr + (long long)v * VEC * XBYTES, xraw[i], x_last_policy);
      load_words<VEC * WBYTES, W_READ>(reinterpret_cast<const char*>(w) + (long long)v * VEC * WBYTES, wraw[i], w_policy);
#if FC_RESIDUAL
      // The row held from here on is the rounded sum, stored back as the new residual.
      float added[VEC];
      load<FC_X_DTYPE, VEC>(rr + (long long)v * VEC * XBYTES, added);
#pragma unroll
      for (int e = 0; e < VEC; ++e) added[e] += word_element<FC_X_DTYPE>(xraw[i], e);
      pack_words<FC_X_DTYPE, VEC>(added, xraw[i]);
      store_words<VEC * XBYTES>(rr + (long long)v * VEC * XBYTES, xraw[i]);
#endif
    } else {
#pragma unroll
      for (int k = 0; k < XW; ++k) xraw[i][k] = 0u;
#pragma unroll
      for (int k = 0; k < WW; ++k) wraw[i][k] = 0u;
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float value = word_element<FC_X_DTYPE>(xraw[i], e);
      sum += value * value;
    }
#else
    float vals[VEC];
    if (in_row) {
      load<FC_X_DTYPE, VEC, X_FIRST_READ>(xr + (long long)v * VEC * XBYTES, vals, x_first_policy);
#if FC_RESIDUAL
      float added[VEC];
      load<FC_X_DTYPE, VEC>(rr + (long long)v * VEC * XBYTES, added);
#pragma unroll
      for (int e = 0; e < VEC; ++e) vals[e] += added[e];
      unsigned int sum_words[WordsFor<VEC * XBYTES>::value];
      pack_words<FC_X_DTYPE, VEC>(vals, sum_words);
      store_words<VEC * XBYTES>(rr + (long long)v * VEC * XBYTES, sum_words);
      // Normalized as stored: the sum rounded to the activation dtype.
#pragma unroll
      for (int e = 0; e < VEC; ++e) vals[e] = word_element<FC_X_DTYPE>(sum_words, e);
#endif
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) vals[e] = 0.f;
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      sum += vals[e] * vals[e];
#if FC_STORAGE == 1
      if (local < SLICE) held[local * VEC + e] = vals[e];
#endif
    }
#endif
  }

  // Reduce within the row's threads: shuffles inside a wave, shared memory across waves.
#pragma unroll
  for (int offset = (TPR < WAVE ? TPR : WAVE) / 2; offset > 0; offset /= 2) sum += FC_SHFL_XOR(sum, offset);
  if (WAVES_PER_ROW > 1) {
    __shared__ float partial[ROWS * WAVES_PER_ROW];
    const int wave_in_row = lane / WAVE;
    if (lane % WAVE == 0) partial[sub * WAVES_PER_ROW + wave_in_row] = sum;
    __syncthreads();
    sum = 0.f;
#pragma unroll
    for (int k = 0; k < WAVES_PER_ROW; ++k) sum += partial[sub * WAVES_PER_ROW + k];
  }
#if FC_CLUSTER > 1
  {
    // Pushed, not pulled: lane r stores this block's partial into block r, and each block
    // waits only for the bytes it expects, not for the whole cluster; none touches
    // another's memory after its stores (a block may then finish while others still run).
    const unsigned int rank = blockIdx.x % CLUSTER;
    cluster_wait();
    if (lane < CLUSTER) cluster_store_counted(&cluster_partial[rank * ROWS + sub], bar, (unsigned int)lane, sum);
    wait_bytes(bar);
    sum = 0.f;  // the same order on every block: the whole row gets one scale
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) sum += cluster_partial[r * ROWS + sub];
  }
#endif
  const float scale = rsqrtf(sum * (1.0f / (float)N) + eps);

#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int local = lane + i * TPR;
    const int v = first + local;
    if (!active || local >= SLICE || v >= NV) continue;
    float vals[VEC];
#if FC_STORAGE == 0
#pragma unroll
    for (int e = 0; e < VEC; ++e) vals[e] = word_element<FC_X_DTYPE>(xraw[i], e) * scale * word_element<FC_W_DTYPE>(wraw[i], e);
#else
#if FC_STORAGE == 1
#pragma unroll
    for (int e = 0; e < VEC; ++e) vals[e] = held[local * VEC + e];
#else
#if FC_RESIDUAL
    // The second read of a re-read row is of the sum this thread stored.  A plain load: a
    // hinted one is an asm statement the compiler may move above that store.
    load<FC_X_DTYPE, VEC>(rr + (long long)v * VEC * XBYTES, vals);
#else
    load<FC_X_DTYPE, VEC, X_LAST_READ>(xr + (long long)v * VEC * XBYTES, vals, x_last_policy);
#endif
#endif
    float wv[VEC];
    load<FC_W_DTYPE, VEC, W_READ>(reinterpret_cast<const char*>(w) + (long long)v * VEC * WBYTES, wv, w_policy);
#pragma unroll
    for (int e = 0; e < VEC; ++e) vals[e] = vals[e] * scale * wv[e];
#endif
    store<FC_X_DTYPE, VEC, Y_STREAM>(yr + (long long)v * VEC * XBYTES, vals);
  }
}
