// topocoll's interpreter kernel: one launch per GPU per call runs a device program
// (kernels/native/device_program.py) for every rank that lives on this GPU.
//
// Thread block b runs the records block_start[b] .. block_start[b+1]-1 in order.  Before a
// record it waits (acquire) until the flags of the blocks it depends on reach
// epoch * stride + index + 1; after it, the block publishes its own flag (release).  Flags
// only grow: the epoch of a call is the block's own counter + 1, kept in device memory, so a
// captured CUDA graph replays without new arguments.  Every wait is bounded: past timeout_ns
// the block raises the abort word (all waiting blocks then leave) and writes what it waited
// for into the host-visible status words, which the launcher turns into an error.
//
// Compile-time parameters (-D): TC_DT (element type, see dtype codes below), TC_OP (0 sum,
// 1 prod, 2 max, 3 min), TC_SCOPE_SYS (1: flags ordered at system scope and every thread's
// writes fenced system-wide before a flag is published, for peers on other GPUs or in other
// processes reading through CUDA IPC mappings; 0: GPU scope, one process on one GPU),
// TC_THREADS (threads per block).
//
// Reductions follow the NumPy twins (kernels/backends/kernel_twins.py) operation by
// operation: 16-bit floating types compute in float32 and round once to the type, products
// and sums are separate IEEE operations (__fmul_rn/__fadd_rn: no fused multiply-add), integer
// sums and products wrap.  Floating max/min follow the one rule of every executor
// (kernel_twins.float_minmax): a NaN operand dropped as NCCL's fmaxf/__hmax drop it (NaN only when
// both are; v2.28.9-1 src/device/reduce_kernel.h:397-436), +0 above -0 for every type (__hmax's
// rule; CUDA leaves fmaxf(+0, -0) open), and a NaN of both operands the positive NaN with every
// payload bit set (0x7fff / 0x7fffffff / 0x7fffffffffffffff).  float8 follows NCCL (v2.28.9-1
// src/device/reduce_kernel.h:440-455, 719-760): the op in half (__hadd/__hmul/__hmax/__hmin),
// the result narrowed with saturation (cuda_fp8.hpp __NV_SATFINITE); see tc_f8_round.

#define TC_INT8 0
#define TC_UINT8 1
#define TC_INT32 2
#define TC_UINT32 3
#define TC_INT64 4
#define TC_UINT64 5
#define TC_FLOAT16 6
#define TC_FLOAT32 7
#define TC_FLOAT64 8
#define TC_BFLOAT16 9
#define TC_E4M3 10
#define TC_E5M2 11

#ifndef TC_THREADS
#define TC_THREADS 512
#endif

typedef unsigned long long u64;
typedef long long i64;

#if TC_DT == TC_INT8
typedef signed char T;   typedef unsigned char UT;
#elif TC_DT == TC_UINT8
typedef unsigned char T; typedef unsigned char UT;
#elif TC_DT == TC_INT32
typedef int T;           typedef unsigned int UT;
#elif TC_DT == TC_UINT32
typedef unsigned int T;  typedef unsigned int UT;
#elif TC_DT == TC_INT64
typedef long long T;     typedef unsigned long long UT;
#elif TC_DT == TC_UINT64
typedef unsigned long long T; typedef unsigned long long UT;
#elif TC_DT == TC_FLOAT32
typedef float T;
#elif TC_DT == TC_FLOAT64
typedef double T;
#elif TC_DT == TC_FLOAT16 || TC_DT == TC_BFLOAT16
typedef unsigned short T;
#define TC_VIA_FLOAT 1
#else
typedef unsigned char T;
#define TC_VIA_FLOAT 1
#endif

#if TC_DT <= TC_UINT64
#define TC_INTEGER 1
#endif

// ---------------------------------------------------------------- 8/16-bit float conversions
#ifdef TC_VIA_FLOAT
// float -> 8-bit float as cuda_fp8.hpp's __nv_cvt_*_to_fp8(.., __NV_SATFINITE, ..): round to
// nearest even, overflow and +-inf to +-largest finite (maxcode), NaN to 0x7f.
__device__ __forceinline__ unsigned char tc_to_f8(float f, int M, int bias, unsigned maxcode, float min_normal) {
    unsigned u = __float_as_uint(f);
    unsigned sign = (u >> 24) & 0x80u;
    unsigned a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned char)0x7fu;
    if (a == 0x7f800000u) return (unsigned char)(sign | maxcode);
    float af = __uint_as_float(a);
    if (af < min_normal) {
        float q = rintf(__fmul_rn(af, __int_as_float((127 + bias + M - 1) << 23)));
        return (unsigned char)(sign | (unsigned)q);
    }
    int shift = 23 - M;
    unsigned r = (a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u)) >> shift;
    int e = (int)(r >> M) - 127 + bias;
    unsigned code = ((unsigned)e << M) | (r & ((1u << M) - 1u));
    if (code > maxcode) return (unsigned char)(sign | maxcode);
    return (unsigned char)(sign | code);
}

// not a build option: tests/kernels/native/test_interpreter_f8.py compiles this file up to
// tc_div for the CPU, with its own two half conversions
#ifndef TOPOCOLL_CPU_TEST
__device__ __forceinline__ float tc_half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short tc_float_to_half(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

// a float32 result of one op on two float8 values -> float8 as NCCL gets it: the op's exact
// result rounded to half (__hadd/__hmul round once; float32 then half is the same rounding, as
// float32 has 24 >= 2*11+2 bits), then narrowed by __nv_fp8_*(__half) with saturation.
__device__ __forceinline__ unsigned char tc_f8_round(float f, int M, int bias, unsigned maxcode, float min_normal) {
    return tc_to_f8(tc_half_to_float(tc_float_to_half(f)), M, bias, maxcode, min_normal);
}

__device__ __forceinline__ float tof(T x) {
#if TC_DT == TC_FLOAT16
    return tc_half_to_float(x);
#elif TC_DT == TC_BFLOAT16
    return __uint_as_float(((unsigned)x) << 16);
#elif TC_DT == TC_E5M2
    return tc_half_to_float((unsigned short)(((unsigned)x) << 8));
#else   // e4m3fn
    unsigned s = (x & 0x80u) << 24, e = (x >> 3) & 15u, m = x & 7u;
    if (e == 15u && m == 7u) return __uint_as_float(s | 0x7fc00000u);
    if (e == 0u) return __uint_as_float(s | __float_as_uint(__fmul_rn((float)m, 0.001953125f)));
    return __uint_as_float(s | ((e + 120u) << 23) | (m << 20));
#endif
}

__device__ __forceinline__ T fromf(float f) {
#if TC_DT == TC_FLOAT16
    return tc_float_to_half(f);
#elif TC_DT == TC_BFLOAT16
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#elif TC_DT == TC_E5M2
    return tc_f8_round(f, 2, 15, 0x7bu, 6.103515625e-05f);
#else
    return tc_f8_round(f, 3, 7, 0x7eu, 0.015625f);
#endif
}
#endif

// ---------------------------------------------------------------- the element operations
__device__ __forceinline__ T tc_bin(T a, T b) {
#if defined(TC_INTEGER)
#if TC_OP == 0
    return (T)((UT)a + (UT)b);
#elif TC_OP == 1
    return (T)((UT)a * (UT)b);
#elif TC_OP == 2
    return a >= b ? a : b;
#else
    return a <= b ? a : b;
#endif
#elif defined(TC_VIA_FLOAT)
    float x = tof(a), y = tof(b);
#if TC_OP == 0
    return fromf(__fadd_rn(x, y));
#elif TC_OP == 1
    return fromf(__fmul_rn(x, y));
#else
    // __hmax / __hmin (cuda_fp16.hpp, cuda_bf16.hpp): the other operand when one is NaN, +0 above
    // -0 (the sign bit is the top bit of T); float8's pick then goes through __nv_fp8_*(__half),
    // which saturates e5m2's infinity
    const unsigned top = 1u << (8 * sizeof(T) - 1);
    bool keep = (TC_OP == 2 ? x >= y : x <= y) || y != y;
    if (x == y) keep = (TC_OP == 2) == ((a & top) <= (b & top));
#if TC_DT >= TC_E4M3
    return fromf(keep ? x : y);
#else
    if (x != x && y != y) return (T)0x7fffu;   // both NaN: the one NaN
    return keep ? a : b;
#endif
#endif
#elif TC_DT == TC_FLOAT32
#if TC_OP == 0
    return __fadd_rn(a, b);
#elif TC_OP == 1
    return __fmul_rn(a, b);
#else
    // fmaxf / fminf: NaN dropped; +0 above -0; both NaN: the one NaN
    if (a != a && b != b) return __uint_as_float(0x7fffffffu);
    if (a == b) return (__float_as_uint(a) >> 31) == (TC_OP == 2 ? 0u : 1u) ? a : b;
    return ((TC_OP == 2 ? a > b : a < b) || b != b) ? a : b;
#endif
#else
#if TC_OP == 0
    return __dadd_rn(a, b);
#elif TC_OP == 1
    return __dmul_rn(a, b);
#else
    // fmax / fmin: as float above
    if (a != a && b != b) return __longlong_as_double(0x7fffffffffffffffLL);
    if (a == b) return ((unsigned long long)__double_as_longlong(a) >> 63) == (TC_OP == 2 ? 0ull : 1ull) ? a : b;
    return ((TC_OP == 2 ? a > b : a < b) || b != b) ? a : b;
#endif
#endif
}

// floating avg: one contribution times 1/n, rounded to the type (NCCL's PreMulSum)
__device__ __forceinline__ T tc_premul(T x, double s) {
#if defined(TC_INTEGER)
    return x;
#elif defined(TC_VIA_FLOAT)
    return fromf(__fmul_rn(tof(x), (float)s));
#elif TC_DT == TC_FLOAT32
    return __fmul_rn(x, (float)s);
#else
    return __dmul_rn(x, s);
#endif
}

// avg's final division (integers: C division truncates toward zero)
__device__ __forceinline__ T tc_div(T x, int n) {
#if defined(TC_INTEGER)
    return (T)(x / (T)n);
#elif defined(TC_VIA_FLOAT)
    return fromf(__fdiv_rn(tof(x), (float)n));
#elif TC_DT == TC_FLOAT32
    return __fdiv_rn(x, (float)n);
#else
    return __ddiv_rn(x, (double)n);
#endif
}

// a reduce or scale of one element (kinds: record_format.KINDS)
__device__ __forceinline__ T tc_apply(int kind, T a, T s, double avg, int n) {
    switch (kind) {
        case TC_KIND_REDUCE: return tc_bin(a, s);
        case TC_KIND_REDUCE_PREMUL_ACC: return tc_bin(tc_premul(a, avg), s);
        case TC_KIND_REDUCE_PREMUL_SRC: return tc_bin(a, tc_premul(s, avg));
        case TC_KIND_REDUCE_PREMUL_BOTH: return tc_bin(tc_premul(a, avg), tc_premul(s, avg));
        default: return tc_div(a, n);
    }
}

#define TC_V (16 / (int)sizeof(T))
// the copy loop: 16-byte vectors each thread has in flight, and optional streaming cache hints
#ifndef TC_COPY_UNROLL
#define TC_COPY_UNROLL 4
#endif
#if defined(TC_CS) && TC_CS
#define TC_LD(p) __ldcs(p)
#define TC_ST(p, v) __stcs(p, v)
#else
#define TC_LD(p) (*(p))
#define TC_ST(p, v) (*(p) = (v))
#endif
union tc_vec { uint4 u; T e[16 / sizeof(T)]; };

__device__ __forceinline__ T tc_pre(T x, bool scale, double avg) { return scale ? tc_premul(x, avg) : x; }

// A resolved record (launcher.py) has TC_REC_WORDS words: dst, src (a chain: address of its
// source list), acc, count, kind word, tile word (bits 0-31: elements per tile, 0 for one
// contiguous run; bits 32-63: elements from one tile's start to the next's), LL outputs (address
// of the list of LL regions the record also writes).  The kind word's bits and every limit come
// from kernels/native/record_format.py as -D options (source.py); none is defined here.
#if !defined(TC_REC_WORDS) || !defined(TC_K_LL) || !defined(TC_MAX_CHAIN) || !defined(TC_LL_LINE_BYTES)
#error "interpreter.cu needs the record format's -D options (kernels/native/record_format.py cuda_defines)"
#endif
// records and waits of a block are staged in shared memory when they fit
#define TC_SMEM_RECORDS 64
#define TC_SMEM_WAITS 128

// 8-bit float builds call the two record loops below (one call per record) rather than inline them
// into the kernel: their vector loops hold 16 elements x every record kind's float8 roundings
// (tc_to_f8, a branchy function where 16-bit types have one cvt), and NVVM's optimizer took ten
// times the 16-bit time on the one inlined kernel function, twice what it takes on three.
// Every other type inlines them as before.
#if TC_DT >= TC_E4M3
#define TC_RECORD_INLINE __noinline__
#else
#define TC_RECORD_INLINE __forceinline__
#endif

// dst = acc op src[0] op src[1] ... (a chain), all threads of the block; the sources' elements
// start `off` elements past their listed addresses (the tile being run)
__device__ TC_RECORD_INLINE void tc_run_chain(T* dst, const T* acc, const u64* srcs_at, int nsrc, unsigned mask,
                                              bool pacc, i64 count, double avg, i64 off) {
    unsigned tid = threadIdx.x;
#define TC_SRC(j) ((const T*)srcs_at[j] + off)
    u64 d = (u64)dst, diff = (d ^ (u64)acc) & 15u;
    for (int j = 0; j < nsrc; ++j) diff |= (d ^ (u64)TC_SRC(j)) & 15u;
    i64 head = count;
    if (diff == 0 && (d % sizeof(T)) == 0) {
        head = (i64)(((16u - (d & 15u)) & 15u) / sizeof(T));
        if (head > count) head = count;
    }
    i64 nvec = (count - head) / TC_V, tail = head + nvec * TC_V;
    for (i64 i = tid; i < head; i += TC_THREADS) {
        T x = tc_pre(acc[i], pacc, avg);
        for (int j = 0; j < nsrc; ++j) x = tc_bin(x, tc_pre(TC_SRC(j)[i], (mask >> j) & 1u, avg));
        dst[i] = x;
    }
    for (i64 i = tid; i < nvec; i += TC_THREADS) {
        tc_vec x;
        x.u = ((const uint4*)(acc + head))[i];
        if (pacc) {
#pragma unroll
            for (int k = 0; k < TC_V; ++k) x.e[k] = tc_premul(x.e[k], avg);
        }
        for (int j = 0; j < nsrc; ++j) {
            tc_vec y;
            y.u = ((const uint4*)(TC_SRC(j) + head))[i];
            bool p = (mask >> j) & 1u;
#pragma unroll
            for (int k = 0; k < TC_V; ++k) x.e[k] = tc_bin(x.e[k], tc_pre(y.e[k], p, avg));
        }
        ((uint4*)(dst + head))[i] = x.u;
    }
    for (i64 i = tail + tid; i < count; i += TC_THREADS) {
        T x = tc_pre(acc[i], pacc, avg);
        for (int j = 0; j < nsrc; ++j) x = tc_bin(x, tc_pre(TC_SRC(j)[i], (mask >> j) & 1u, avg));
        dst[i] = x;
    }
#undef TC_SRC
}

// one copy / reduce / scale record, all threads of the block
__device__ TC_RECORD_INLINE void tc_run_record(int kind, T* dst, const T* src, const T* acc, i64 count, double avg,
                                               int n) {
    unsigned tid = threadIdx.x;
    if (kind == TC_KIND_SCALE) { src = dst; acc = dst; }
    if (kind == TC_KIND_COPY) acc = dst;
    u64 d = (u64)dst, s = (u64)src, a = (u64)acc;
    i64 head = count;
    if (((d ^ s) & 15u) == 0 && ((d ^ a) & 15u) == 0 && (d % sizeof(T)) == 0) {
        head = (i64)(((16u - (d & 15u)) & 15u) / sizeof(T));
        if (head > count) head = count;
    }
    i64 nvec = (count - head) / TC_V;
    i64 tail = head + nvec * TC_V;
    for (i64 i = tid; i < head; i += TC_THREADS)
        dst[i] = kind == TC_KIND_COPY ? src[i] : tc_apply(kind, acc[i], src[i], avg, n);
    const uint4* sv = (const uint4*)(src + head);
    const uint4* av = (const uint4*)(acc + head);
    uint4* dv = (uint4*)(dst + head);
    if (kind == TC_KIND_COPY) {
        i64 i = tid;
        for (; i + (TC_COPY_UNROLL - 1) * TC_THREADS < nvec; i += TC_COPY_UNROLL * TC_THREADS) {
            uint4 x[TC_COPY_UNROLL];
#pragma unroll
            for (int k = 0; k < TC_COPY_UNROLL; ++k) x[k] = TC_LD(sv + i + k * TC_THREADS);
#pragma unroll
            for (int k = 0; k < TC_COPY_UNROLL; ++k) TC_ST(dv + i + k * TC_THREADS, x[k]);
        }
        for (; i < nvec; i += TC_THREADS) dv[i] = sv[i];
    } else {
        i64 i = tid;
        for (; i + TC_THREADS < nvec; i += 2 * TC_THREADS) {
            tc_vec x0, y0, x1, y1;
            x0.u = av[i]; y0.u = sv[i]; x1.u = av[i + TC_THREADS]; y1.u = sv[i + TC_THREADS];
#pragma unroll
            for (int k = 0; k < TC_V; ++k) {
                x0.e[k] = tc_apply(kind, x0.e[k], y0.e[k], avg, n);
                x1.e[k] = tc_apply(kind, x1.e[k], y1.e[k], avg, n);
            }
            dv[i] = x0.u; dv[i + TC_THREADS] = x1.u;
        }
        for (; i < nvec; i += TC_THREADS) {
            tc_vec x, y;
            x.u = av[i]; y.u = sv[i];
#pragma unroll
            for (int k = 0; k < TC_V; ++k) x.e[k] = tc_apply(kind, x.e[k], y.e[k], avg, n);
            dv[i] = x.u;
        }
    }
    for (i64 i = tail + tid; i < count; i += TC_THREADS)
        dst[i] = kind == TC_KIND_COPY ? src[i] : tc_apply(kind, acc[i], src[i], avg, n);
}

// ---------------------------------------------------------------- flags
// the flags' scope as PTX spells it: system for peers on other GPUs or in other processes
#if TC_SCOPE_SYS
#define TC_SCOPE ".sys"
#else
#define TC_SCOPE ".gpu"
#endif

__device__ __forceinline__ u64 tc_load_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire" TC_SCOPE ".global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void tc_store_release(u64* p, u64 v) {
    asm volatile("st.release" TC_SCOPE ".global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

// polling load: relaxed at the flags' scope, so a spinning warp does not invalidate its SM's
// L1 on every poll (an acquire load does); the acquire load comes once, after the poll is met
__device__ __forceinline__ u64 tc_poll_relaxed(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed" TC_SCOPE ".global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned tc_load_relaxed(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 tc_now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// waits: pairs (address of the awaited block's flag, record index); threads 0 .. count-1 each
// poll one (relaxed, backing off with nanosleep after 32 polls), then load it once with
// acquire; returns 0 when aborted or timed out
__device__ __forceinline__ int tc_wait(const u64* waits, int w0, int w1, const int* __restrict__ wait_block,
                                       u64 base, unsigned* abort_word, volatile unsigned* status,
                                       int gblock, int rec, u64 timeout_ns) {
    int ok = 1;
    for (int w = w0 + (int)threadIdx.x; w < w1; w += TC_THREADS) {
        const u64* f = (const u64*)waits[2 * w];
        u64 target = base + waits[2 * w + 1] + 1u;
        if (tc_load_acquire(f) >= target) continue;
        u64 start = tc_now_ns();
        unsigned spins = 0;
        while (tc_poll_relaxed(f) < target) {
            if (++spins > 32u) __nanosleep(spins > 1024u ? 256u : 64u);   // long waits yield the SM
            if ((spins & 255u) == 0u) {
                if (tc_load_relaxed(abort_word)) { ok = 0; break; }
                if (tc_now_ns() - start > timeout_ns) {
                    if (atomicExch(abort_word, 1u) == 0u) {
                        status[1] = (unsigned)gblock; status[2] = (unsigned)rec;
                        status[3] = (unsigned)wait_block[w]; status[4] = (unsigned)waits[2 * w + 1];
                        __threadfence_system();
                        status[0] = 1u;
                    }
                    ok = 0;
                    break;
                }
            }
        }
        if (!ok) break;
        (void)tc_load_acquire(f);          // met: acquire what the flag's publisher released
    }
    return ok;
}

// ---------------------------------------------------------------- the LL protocol
// An LL line is 16 bytes {data bytes 0-3, flag, data bytes 4-7, flag} (NCCL's LL fifo line): a
// writer stores it with one 16-byte volatile store, a reader takes it when both flags are the
// call's epoch, so neither a line of an earlier call nor one torn between its 8-byte halves is
// read as fresh.  Records of one pass (kernels/native/ll.py) run in 8-byte units, every thread
// of the block taking units of any of them.
#define TC_E ((int)(8 / sizeof(T)))
union tc_unit { u64 w; T e[8 / sizeof(T)]; };

__device__ __forceinline__ uint4 tc_ll_load(const void* p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void tc_ll_store(void* p, u64 data, unsigned flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "r"((unsigned)data), "r"(flag), "r"((unsigned)(data >> 32)), "r"(flag) : "memory");
}

__device__ __forceinline__ bool tc_ll_fresh(uint4 v, unsigned ep) { return v.y == ep && v.w == ep; }
__device__ __forceinline__ u64 tc_ll_data(uint4 v) { return (u64)v.x | ((u64)v.z << 32); }

// the unit's first ne elements at p (the rest 0), one 8-byte access where aligned
__device__ __forceinline__ u64 tc_unit_load(const T* p, int ne) {
    if (ne == TC_E && ((u64)p & 7u) == 0) return *(const u64*)p;
    tc_unit u;
    u.w = 0;
#pragma unroll
    for (int k = 0; k < TC_E; ++k)
        if (k < ne) u.e[k] = p[k];
    return u.w;
}

__device__ __forceinline__ void tc_unit_store(T* p, u64 w, int ne) {
    if (ne == TC_E && ((u64)p & 7u) == 0) { *(u64*)p = w; return; }
    tc_unit u;
    u.w = w;
#pragma unroll
    for (int k = 0; k < TC_E; ++k)
        if (k < ne) p[k] = u.e[k];
}

// wait until the LL line at p is fresh (bounded as tc_wait is); 0 when aborted or timed out
__device__ __forceinline__ int tc_ll_poll(const char* p, unsigned ep, u64& out, unsigned* abort_word,
                                          volatile unsigned* status, int gblock, int rec, i64 unit, u64 timeout_ns) {
    u64 start = tc_now_ns();
    for (unsigned spins = 1;; ++spins) {
        uint4 v = tc_ll_load(p);
        if (tc_ll_fresh(v, ep)) { out = tc_ll_data(v); return 1; }
        if (spins > 1024u) __nanosleep(64u);
        if ((spins & 255u) == 0u) {
            if (tc_load_relaxed(abort_word)) return 0;
            if (tc_now_ns() - start > timeout_ns) {
                if (atomicExch(abort_word, 1u) == 0u) {
                    status[1] = (unsigned)gblock; status[2] = (unsigned)rec;
                    status[3] = TC_LL_WAIT; status[4] = (unsigned)unit;     // an LL line, not a flag
                    __threadfence_system();
                    status[0] = 1u;
                }
                return 0;
            }
        }
    }
}

// operand j of an LL record for unit k: its LL line (polled until fresh) or its elements in memory
__device__ __forceinline__ int tc_ll_operand(u64 at, bool from_ll, i64 k, i64 e0, int ne, unsigned ep, u64& out,
                                             unsigned* abort_word, volatile unsigned* status, int gb, int ri,
                                             u64 timeout_ns) {
    if (!from_ll) { out = tc_unit_load((const T*)at + e0, ne); return 1; }
    const char* line = (const char*)at + k * TC_LL_LINE_BYTES;
    uint4 v = tc_ll_load(line);
    if (tc_ll_fresh(v, ep)) { out = tc_ll_data(v); return 1; }
    return tc_ll_poll(line, ep, out, abort_word, status, gb, ri, k, timeout_ns);
}

// unit k (data bytes 8k .. 8k+7) of one LL record: its operands loaded (a chain's sources
// TC_LL_GROUP at a time, every load of a group issued before any is waited for), the elements
// computed as the Simple path computes them, stored, and written to the record's LL regions; 0
// when aborted
#define TC_LL_GROUP 4
#if defined(TC_LL_INLINE) && TC_LL_INLINE
#define TC_LL_UNIT_INLINE __forceinline__
#else
#define TC_LL_UNIT_INLINE __noinline__      // one copy of the unit's code: 8-bit float builds stay small
#endif
__device__ TC_LL_UNIT_INLINE int tc_ll_unit(const u64* rec, const u64* srcs, const u64* outs, i64 k, unsigned ep,
                                          double avg, int n, unsigned* abort_word, volatile unsigned* status,
                                          int gb, int ri, u64 timeout_ns) {
    const u64 word = rec[TC_W_KIND];
    const int kind = (int)(word & TC_K_MASK);
    const i64 count = (i64)rec[TC_W_COUNT], e0 = k * TC_E;
    const int ne = (int)(count - e0 < TC_E ? count - e0 : TC_E);
    const unsigned from_ll = (unsigned)(word >> TC_K_LL_SRC_SHIFT) & 0xffffu;
    T* dst = (T*)rec[TC_W_DST] + e0;
    tc_unit a, x, y;
    a.w = kind == TC_KIND_COPY ? 0 : tc_unit_load(kind == TC_KIND_SCALE ? dst : (const T*)rec[TC_W_ACC] + e0, ne);
    if (kind == TC_KIND_CHAIN) {
        const int nsrc = (int)((word >> TC_K_CHAIN_SHIFT) & 255u);
        const bool pacc = (word & TC_K_PREMUL_ACC) != 0;
        const unsigned mask = (unsigned)(word >> TC_K_PREMUL_SHIFT) & 0xffffu;
#pragma unroll
        for (int e = 0; e < TC_E; ++e) x.e[e] = tc_pre(a.e[e], pacc, avg);
#pragma unroll 1
        for (int g = 0; g < nsrc; g += TC_LL_GROUP) {
            u64 s[TC_LL_GROUP];
            unsigned pending = 0;
#pragma unroll
            for (int q = 0; q < TC_LL_GROUP; ++q) {          // issue the group's loads
                const int j = g + q;
                if (j < nsrc) {
                    if ((from_ll >> j) & 1u) {
                        uint4 v = tc_ll_load((const char*)srcs[j] + k * TC_LL_LINE_BYTES);
                        s[q] = tc_ll_data(v);
                        if (!tc_ll_fresh(v, ep)) pending |= 1u << q;
                    } else {
                        s[q] = tc_unit_load((const T*)srcs[j] + e0, ne);
                    }
                }
            }
#pragma unroll
            for (int q = 0; q < TC_LL_GROUP; ++q)
                if (((pending >> q) & 1u) && !tc_ll_poll((const char*)srcs[g + q] + k * TC_LL_LINE_BYTES, ep, s[q],
                                                         abort_word, status, gb, ri, k, timeout_ns))
                    return 0;
#pragma unroll
            for (int q = 0; q < TC_LL_GROUP; ++q) {
                const int j = g + q;
                if (j < nsrc) {
                    y.w = s[q];
#pragma unroll
                    for (int e = 0; e < TC_E; ++e) x.e[e] = tc_bin(x.e[e], tc_pre(y.e[e], (mask >> j) & 1u, avg));
                }
            }
        }
    } else if (kind == TC_KIND_SCALE) {
#pragma unroll
        for (int e = 0; e < TC_E; ++e) x.e[e] = tc_div(a.e[e], n);
    } else {
        if (!tc_ll_operand(rec[TC_W_SRC], from_ll & 1u, k, e0, ne, ep, y.w, abort_word, status, gb, ri, timeout_ns))
            return 0;
        if (kind == TC_KIND_COPY) {
            x.w = y.w;
        } else {
#pragma unroll
            for (int e = 0; e < TC_E; ++e) x.e[e] = tc_apply(kind, a.e[e], y.e[e], avg, n);
        }
    }
    tc_unit_store(dst, x.w, ne);
    const int nout = (int)((word >> TC_K_LL_OUT_SHIFT) & 255u);
    for (int t = 0; t < nout; ++t) tc_ll_store((char*)outs[t] + k * TC_LL_LINE_BYTES, x.w, ep);
    return 1;
}

// one LL pass: records i .. j-1 of the block (kernels/native/ll.py), their units dealt to the
// threads in order (a thread's units only move forward through the records); 0 when aborted
__device__ int tc_ll_pass(const u64* recs, int i, int j, unsigned ep, double avg, int n, unsigned* abort_word,
                          volatile unsigned* status, int gb, u64 timeout_ns) {
    __shared__ i64 s_pre[TC_MAX_BATCH + 1];
    __shared__ u64 s_lists[TC_MAX_BATCH][TC_MAX_CHAIN + TC_MAX_LL_OUT];
    const int m = j - i, width = TC_MAX_CHAIN + TC_MAX_LL_OUT;
    for (int t = threadIdx.x; t < m * width; t += TC_THREADS) {      // chain sources and LL outputs
        const int r = t / width, q = t % width;
        const u64* rec = recs + (i64)(i + r) * TC_REC_WORDS;
        const u64 word = rec[TC_W_KIND];
        const int nsrc = (word & TC_K_MASK) == TC_KIND_CHAIN ? (int)((word >> TC_K_CHAIN_SHIFT) & 255u) : 0;
        const int nout = (int)((word >> TC_K_LL_OUT_SHIFT) & 255u);
        if (q < nsrc) s_lists[r][q] = ((const u64*)rec[TC_W_SRC])[q];
        else if (q >= TC_MAX_CHAIN && q - TC_MAX_CHAIN < nout) s_lists[r][q] = ((const u64*)rec[TC_W_LL_OUT])[q - TC_MAX_CHAIN];
    }
    if (threadIdx.x == 0) {
        i64 total = 0;
        s_pre[0] = 0;
        for (int r = 0; r < m; ++r) {
            total += ((i64)recs[(i64)(i + r) * TC_REC_WORDS + TC_W_COUNT] * (i64)sizeof(T) + 7) / 8;
            s_pre[r + 1] = total;
        }
    }
    __syncthreads();
    int r = 0;
    for (i64 u = threadIdx.x; u < s_pre[m]; u += TC_THREADS) {
        while (u >= s_pre[r + 1]) ++r;
        if (!tc_ll_unit(recs + (i64)(i + r) * TC_REC_WORDS, s_lists[r], s_lists[r] + TC_MAX_CHAIN, u - s_pre[r], ep,
                        avg, n, abort_word, status, gb, i + r, timeout_ns))
            return 0;
    }
    return 1;
}

// records: resolved records (TC_REC_WORDS words each); waits: (flag address, index) pairs,
// wait_block: the awaited block of each wait (for the error report)
extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
topocoll_interpreter(const u64* __restrict__ records, const int* __restrict__ block_start,
                     const int* __restrict__ wait_start, const u64* __restrict__ waits,
                     const int* __restrict__ wait_block, u64* const* flag_ptrs, u64* epochs,
                     int block_offset, u64 stride, int nranks, double avg_scalar,
                     unsigned* abort_word, unsigned* status, u64 timeout_ns) {
    const int gb = block_offset + (int)blockIdx.x;
    __shared__ u64 s_base;
    __shared__ u64 s_rec[TC_SMEM_RECORDS * TC_REC_WORDS];
    __shared__ u64 s_wait[TC_SMEM_WAITS * 2];
    __shared__ u64 s_src[2][TC_MAX_CHAIN];
    const int r0 = block_start[gb], r1 = block_start[gb + 1];
    const int w_first = wait_start[r0], w_last = wait_start[r1];
    const bool rec_in_smem = r1 - r0 <= TC_SMEM_RECORDS, wait_in_smem = w_last - w_first <= TC_SMEM_WAITS;
    if (threadIdx.x == 0) s_base = (epochs[gb] + 1u) * stride;
    if (rec_in_smem)
        for (int i = threadIdx.x; i < (r1 - r0) * TC_REC_WORDS; i += TC_THREADS)
            s_rec[i] = records[(i64)r0 * TC_REC_WORDS + i];
    if (wait_in_smem)
        for (int i = threadIdx.x; i < (w_last - w_first) * 2; i += TC_THREADS) s_wait[i] = waits[2 * (i64)w_first + i];
    __syncthreads();
    const u64 base = s_base;
    const u64* recs = rec_in_smem ? s_rec - (i64)r0 * TC_REC_WORDS : records;
    const u64* wts = wait_in_smem ? s_wait - 2 * (i64)w_first : waits;
    u64* my_flag = flag_ptrs[gb];
    for (int i = r0; i < r1; ++i) {
        const u64* rec = recs + (i64)i * TC_REC_WORDS;
        const u64 word = rec[TC_W_KIND];
        if (word & TC_K_LL) {             // the LL protocol: a pass over this record and those joining it
            int j = i + 1;
            while (j < r1 && (recs[(i64)j * TC_REC_WORDS + TC_W_KIND] & TC_K_BATCH)) ++j;
            int ok = tc_wait(wts, wait_start[i], wait_start[j], wait_block, base, abort_word, status, gb, i,
                             timeout_ns);
            if (!__syncthreads_and(ok)) return;
            ok = tc_ll_pass(recs, i, j, (unsigned)(base / stride), avg_scalar, nranks, abort_word, status, gb,
                            timeout_ns);
            if (!__syncthreads_and(ok)) return;
            if (recs[(i64)(j - 1) * TC_REC_WORDS + TC_W_KIND] & TC_K_PUBLISH) {
#if TC_SCOPE_SYS
                __threadfence_system();
#endif
                __syncthreads();
                if (threadIdx.x == 0) tc_store_release(my_flag, base + (u64)(j - 1 - r0) + 1u);
            }
            i = j - 1;
            continue;
        }
        const int kind = (int)(word & TC_K_MASK);
        const int nsrc = (int)((word >> TC_K_CHAIN_SHIFT) & 255u);
        if (kind == TC_KIND_CHAIN && (int)threadIdx.x < nsrc)     // a chain's sources, double-buffered by parity
            s_src[i & 1][threadIdx.x] = ((const u64*)rec[TC_W_SRC])[threadIdx.x];
        int ok = tc_wait(wts, wait_start[i], wait_start[i + 1], wait_block, base, abort_word, status, gb, i,
                         timeout_ns);
        if (!__syncthreads_and(ok)) return;
        // the record's tiles in turn (one run when contiguous): `tile` elements, `tstride` apart
        const i64 count = (i64)rec[TC_W_COUNT], tile = (i64)(rec[TC_W_TILE] & 0xffffffffull), tstride = (i64)(rec[TC_W_TILE] >> 32);
        const i64 run = tile ? tile : count;
        for (i64 done = 0, off = 0; done < count; done += run, off += tstride) {
            const i64 n = count - done < run ? count - done : run;
            if (kind == TC_KIND_CHAIN)
                tc_run_chain((T*)rec[TC_W_DST] + off, (const T*)rec[TC_W_ACC] + off, s_src[i & 1], nsrc,
                             (unsigned)(word >> TC_K_PREMUL_SHIFT) & 0xffffu, (word & TC_K_PREMUL_ACC) != 0, n,
                             avg_scalar, off);
            else
                tc_run_record(kind, (T*)rec[TC_W_DST] + off, (const T*)rec[TC_W_SRC] + off, (const T*)rec[TC_W_ACC] + off, n, avg_scalar,
                              nranks);
        }
        if (word & TC_K_PUBLISH) {         // someone waits for this record: publish it
#if TC_SCOPE_SYS
            __threadfence_system();        // each thread's writes reach every GPU and process first
#endif
            __syncthreads();
            if (threadIdx.x == 0) tc_store_release(my_flag, base + (u64)(i - r0) + 1u);
        }
    }
    if (threadIdx.x == 0) epochs[gb] = base / stride;
}
