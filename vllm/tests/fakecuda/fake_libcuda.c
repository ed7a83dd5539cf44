/* A fake of the CUDA driver library (libcuda.so.1) for the plugin's tests:
 * the nine functions mbench_vllm/_fastwrap_events.h calls, with the
 * semantics of NVIDIA's CUDA Driver API reference ("Event Management",
 * "Context Management"), over the tests' fake GPU (tests/standins/fakegpu.py):
 * one stream whose work ends at fakecu_free_at (CLOCK_MONOTONIC ns, the clock of
 * time.perf_counter_ns), which the fake GPU sets at every launch.
 *
 *   cuEventRecord(e, stream)   e completes when the work queued before it
 *                              has: at max(now, free_at)
 *   cuEventQuery(e)            CUDA_SUCCESS (0) when complete or never
 *                              recorded, CUDA_ERROR_NOT_READY (600) if not
 *   cuEventElapsedTime(ms,a,b) CUDA_ERROR_INVALID_HANDLE (400) when either
 *                              was never recorded, 600 when either is not
 *                              complete, else the time between them in ms
 *   cuEventSynchronize(e)      waits for e
 *   cuCtxGetCurrent            the context, once fakecu_init() ran (torch
 *                              made it current: the engine's thread)
 *   cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2   a per-thread stack
 *
 * Test controls: fakecu_free_at (the fake GPU writes it), fakecu_init,
 * fakecu_fail_records_after (the n+1-th record from now returns code),
 * fakecu_records, fakecu_depth (the calling thread's push depth).
 */
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef struct { int recorded; long long t; } ev;

static int ctx_token;
static int ready;
long long fakecu_free_at; /* the stream's work ends here: the fake GPU writes it at every launch */
static long long records, fail_after = -1;
static int fail_code;
static __thread void *stack[16];
static __thread int depth;

static long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void fakecu_init(void) { ready = 1; }
void fakecu_fail_records_after(long long n, int code) { fail_after = n; fail_code = code; }
long long fakecu_records(void) { return records; }
int fakecu_depth(void) { return depth; }

CUresult cuCtxGetCurrent(void **c) {
    *c = depth > 0 ? stack[depth - 1] : ready ? (void *)&ctx_token : NULL;
    return 0;
}
CUresult cuCtxPushCurrent_v2(void *c) {
    if (c != &ctx_token) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    if (depth == 16) return 999;
    stack[depth++] = c;
    return 0;
}
CUresult cuCtxPopCurrent_v2(void **c) {
    if (depth == 0) return 201;
    *c = stack[--depth];
    return 0;
}
CUresult cuEventCreate(void **e, unsigned flags) {
    (void)flags;
    ev *x = calloc(1, sizeof *x);
    if (x == NULL) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *e = x;
    return 0;
}
CUresult cuEventRecord(void *e, void *stream) {
    (void)stream;
    if (fail_after == 0) return fail_code;
    if (fail_after > 0) fail_after--;
    ev *x = e;
    long long t = now();
    x->t = t > fakecu_free_at ? t : fakecu_free_at;
    x->recorded = 1;
    records++;
    return 0;
}
CUresult cuEventQuery(void *e) {
    ev *x = e;
    return !x->recorded || now() >= x->t ? 0 : 600;
}
CUresult cuEventSynchronize(void *e) {
    ev *x = e;
    while (x->recorded && now() < x->t) {
        struct timespec d = {0, 20000};
        nanosleep(&d, NULL);
    }
    return 0;
}
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    ev *x = a, *y = b;
    if (!x->recorded || !y->recorded) return 400;
    if (cuEventQuery(a) || cuEventQuery(b)) return 600;
    *ms = (float)((y->t - x->t) / 1e6);
    return 0;
}
CUresult cuEventDestroy_v2(void *e) {
    free(e);
    return 0;
}
