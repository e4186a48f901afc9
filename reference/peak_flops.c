/* This machine's f32 arithmetic peak: fused multiply-adds on independent vector accumulators, on N threads.

Each thread runs its own NACC (12) independent chains `acc = acc * a + b` (`_mm256_fmadd_ps`, 8 lanes; built with
`-mavx512f` it uses `_mm512_fmadd_ps`, 16 lanes, instead). Twelve chains cover an FMA latency of 4-6 cycles on two
FMA pipes; a = 1 - 2^-23 and b = 2^-24 keep every value near 0.5 (no overflow, no denormals). Nothing is loaded or
stored inside the loop: the figure is the arithmetic peak, which no memory-bound kernel reaches.

A one-thread calibration sizes the run to about SECONDS; then RUNS runs on THREADS threads (pthreads, started
together at a barrier), each timed from the first thread's start to the last thread's end, and the best run is
reported: flops = threads x iterations x NACC x lanes x 2 (an FMA lane is two flops).

Build and run (`bench_prompt.py` does both, into its --dir):
    cc -O2 -mavx2 -mfma -pthread reference/peak_flops.c -o /tmp/peak_flops_avx2
    cc -O2 -mavx512f -mfma -pthread reference/peak_flops.c -o /tmp/peak_flops_avx512   # optional
    /tmp/peak_flops_avx2 THREADS [SECONDS=0.5] [RUNS=3]
It prints one JSON object on one line. */

#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define ISA "avx512"
#define FMA(x, y, z) _mm512_fmadd_ps(x, y, z)
#define SET1(x) _mm512_set1_ps(x)
#define ADD(x, y) _mm512_add_ps(x, y)
#define STORE(p, x) _mm512_storeu_ps(p, x)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define ISA "avx2"
#define FMA(x, y, z) _mm256_fmadd_ps(x, y, z)
#define SET1(x) _mm256_set1_ps(x)
#define ADD(x, y) _mm256_add_ps(x, y)
#define STORE(p, x) _mm256_storeu_ps(p, x)
#else
#error "build with -mavx2 -mfma (or -mavx512f -mfma)"
#endif

#define NACC 12

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* NACC independent FMA chains for `iters` iterations; returns the sum of every lane (kept, so nothing is dropped). */
static float kernel(long iters, float seed) {
    const vec a = SET1(1.0f - 1.0f / 8388608.0f), b = SET1(1.0f / 16777216.0f);
    vec c0 = SET1(seed + 0.01f), c1 = SET1(seed + 0.02f), c2 = SET1(seed + 0.03f), c3 = SET1(seed + 0.04f);
    vec c4 = SET1(seed + 0.05f), c5 = SET1(seed + 0.06f), c6 = SET1(seed + 0.07f), c7 = SET1(seed + 0.08f);
    vec c8 = SET1(seed + 0.09f), c9 = SET1(seed + 0.10f), c10 = SET1(seed + 0.11f), c11 = SET1(seed + 0.12f);
    for (long i = 0; i < iters; i++) {
        c0 = FMA(c0, a, b); c1 = FMA(c1, a, b); c2 = FMA(c2, a, b); c3 = FMA(c3, a, b);
        c4 = FMA(c4, a, b); c5 = FMA(c5, a, b); c6 = FMA(c6, a, b); c7 = FMA(c7, a, b);
        c8 = FMA(c8, a, b); c9 = FMA(c9, a, b); c10 = FMA(c10, a, b); c11 = FMA(c11, a, b);
    }
    vec s = ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7)));
    s = ADD(s, ADD(ADD(c8, c9), ADD(c10, c11)));
    float out[LANES], sum = 0.0f;
    STORE(out, s);
    for (int i = 0; i < LANES; i++) sum += out[i];
    return sum;
}

struct job {
    pthread_barrier_t *barrier;
    long iters;
    int index;
    double start, end;
    float sum;
};

static void *worker(void *p) {
    struct job *j = p;
    pthread_barrier_wait(j->barrier);
    j->start = now();
    j->sum = kernel(j->iters, 0.001f * j->index);
    j->end = now();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s THREADS [SECONDS=0.5] [RUNS=3]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]);
    double seconds = argc > 2 ? atof(argv[2]) : 0.5;
    int runs = argc > 3 ? atoi(argv[3]) : 3;
    if (threads < 1 || threads > 1024 || !(seconds > 0) || runs < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }

    /* calibration: double the iterations until a run takes >= 50 ms, then scale to `seconds` */
    long iters = 1 << 16;
    double t;
    float check = 0.0f;
    for (;;) {
        double t0 = now();
        check += kernel(iters, 0.5f);
        t = now() - t0;
        if (t >= 0.05 || iters > (1L << 40)) break;
        iters *= 2;
    }
    iters = (long)(iters * seconds / t) + 1;

    double best = 0.0, best_s = 0.0, rates[64];
    int n_rates = 0;
    struct job *jobs = calloc(threads, sizeof *jobs);
    pthread_t *tids = calloc(threads, sizeof *tids);
    pthread_barrier_t barrier;
    for (int r = 0; r < runs; r++) {
        pthread_barrier_init(&barrier, NULL, threads);
        for (int i = 0; i < threads; i++) {
            jobs[i] = (struct job){.barrier = &barrier, .iters = iters, .index = i};
            if (pthread_create(&tids[i], NULL, worker, &jobs[i]) != 0) {
                fprintf(stderr, "pthread_create failed\n");
                return 1;
            }
        }
        double start = 1e300, end = 0.0;
        for (int i = 0; i < threads; i++) {
            pthread_join(tids[i], NULL);
            if (jobs[i].start < start) start = jobs[i].start;
            if (jobs[i].end > end) end = jobs[i].end;
            check += jobs[i].sum;
        }
        pthread_barrier_destroy(&barrier);
        double flops = 2.0 * threads * (double)iters * NACC * LANES;
        double rate = flops / (end - start) / 1e9;
        if (n_rates < 64) rates[n_rates++] = rate;
        if (rate > best) {
            best = rate;
            best_s = end - start;
        }
    }
    printf("{\"isa\": \"%s\", \"lanes\": %d, \"accumulators\": %d, \"threads\": %d, \"iterations\": %ld, "
           "\"seconds\": %.4f, \"gflops\": %.3f, \"gflops_per_thread\": %.3f, \"runs_gflops\": [",
           ISA, LANES, NACC, threads, iters, best_s, best, best / threads);
    for (int i = 0; i < n_rates; i++) printf("%s%.3f", i ? ", " : "", rates[i]);
    printf("], \"checksum\": %.6g}\n", (double)check);
    free(jobs);
    free(tids);
    return 0;
}
