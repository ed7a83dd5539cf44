/* _fastwrap_events.h: the GPU timer's CUDA events in C (gpu.py is the
 * specification; its torch path does the same with torch.Event). Included
 * once, by _fastwrap.c, after its Timer type.
 *
 * Events  a pool of CUDA events made with the CUDA driver API (libcuda, the
 *         library torch's runtime itself calls; found with dlopen, so this
 *         file needs no CUDA header or library to build), the queue of
 *         recorded pairs, and the reader the flusher calls. Made by
 *         gpu.py's install: Events(lib, pool, max_pending, stream, device)
 *         where stream(device) returns torch's current raw stream (torch's
 *         own torch._C._cuda_getCurrentRawStream). It must be made on a
 *         thread whose CUDA context is torch's (the engine's, once a model
 *         is loaded): that context is kept and made current around every
 *         read on other threads.
 *
 * Also here, the two Timer kinds of the GPU timer (the Timer type is
 * _fastwrap.c's, which includes this file after it): the sampling gate
 * (K_GATE) and the timed forward (K_FWD), which records a pair around
 * _model_forward on the current stream: the start event, the call, one
 * query of the start event (has the GPU reached it, i.e. was the GPU idle
 * while the host launched?), the end event; it queues (batch, start, end,
 * host launch ns). Each record is one cuEventRecord: no Python between the
 * start event and the call, no sync anywhere.
 *
 * The CUDA driver API as used here (NVIDIA's CUDA Driver API reference,
 * "Event Management" and "Context Management"; cuda.h of CUDA 12 and 13):
 * CUresult is an int, 0 CUDA_SUCCESS, 600 CUDA_ERROR_NOT_READY;
 * cuEventCreate(CUevent *, unsigned flags) with CU_EVENT_DEFAULT (0: timing
 * on); cuEventRecord(CUevent, CUstream) (stream 0: the legacy default
 * stream, torch's default); cuEventQuery(CUevent): 0 when all work before
 * the record is done, 600 when not; cuEventElapsedTime(float *ms, start,
 * end): 600 when either is not done; cuEventSynchronize; cuCtxGetCurrent;
 * cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2 and cuEventDestroy_v2 (the
 * names cuda.h maps cuCtxPushCurrent, cuCtxPopCurrent and cuEventDestroy
 * to). tests/fakecuda/fake_libcuda.c models exactly these. */
#ifndef MBENCH_FASTWRAP_EVENTS_H
#define MBENCH_FASTWRAP_EVENTS_H

#include <dlfcn.h>

typedef int cu_result;
#define CU_OK 0
#define CU_NOT_READY 600

static struct {
    int loaded;
    cu_result (*ctx_get)(void **);
    cu_result (*ctx_push)(void *);
    cu_result (*ctx_pop)(void **);
    cu_result (*create)(void **, unsigned);
    cu_result (*record)(void *, void *);
    cu_result (*query)(void *);
    cu_result (*sync)(void *);
    cu_result (*elapsed)(float *, void *, void *);
    cu_result (*destroy)(void *);
} cu;

/* One recorded pair: the batch, its events, the host's launch ns (0 when
   the GPU had not reached the start event when the launch ended). */
typedef struct {
    long long batch, host;
    void *e0, *e1;
} ev_pair;

typedef struct {
    PyObject_HEAD
    void *ctx;            /* torch's CUDA context, from the making thread */
    void **free;          /* events to reuse (a stack) */
    Py_ssize_t nfree, cap_free;
    ev_pair *q;           /* recorded pairs, oldest at head */
    Py_ssize_t head, n, cap;
    long long dropped;    /* pairs dropped unread (no flusher read them) */
    long long created;    /* events made after the pool (it ran dry) */
    int on;               /* recording; off after a failure (gpu.py says why) */
    PyObject *stream;     /* stream(device) -> torch's current raw stream */
    PyObject *device;     /* the device index, an int */
    PyObject *fail;       /* fail(reason): gpu.py's GPU.fail, on a CUDA error */
} Events;

static const char *cu_names[] = {"cuCtxGetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuEventCreate",
                                 "cuEventRecord", "cuEventQuery", "cuEventSynchronize", "cuEventElapsedTime",
                                 "cuEventDestroy_v2"};

static char cu_path[4096]; /* the library cu's functions come from */

/* dlopen lib and find the functions (again only for another lib: the
   tests' fake); NULL, or why not (static text). On failure cu is as it
   was. */
static const char *cu_load(const char *lib) {
    if (cu.loaded && strcmp(lib, cu_path) == 0) return NULL;
    if (strlen(lib) >= sizeof cu_path) return "library path too long";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) return "dlopen failed"; /* dlerror() says why: events_new quotes it */
    void *fn[sizeof cu_names / sizeof cu_names[0]];
    for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
        if ((fn[i] = dlsym(h, cu_names[i])) == NULL) return cu_names[i];
    }
    void **slots[] = {(void **)&cu.ctx_get, (void **)&cu.ctx_push, (void **)&cu.ctx_pop, (void **)&cu.create,
                      (void **)&cu.record, (void **)&cu.query, (void **)&cu.sync, (void **)&cu.elapsed,
                      (void **)&cu.destroy};
    for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) *slots[i] = fn[i];
    strcpy(cu_path, lib);
    cu.loaded = 1;
    return NULL;
}

/* torch's current raw stream, or -1 with a Python error set. */
static int ev_stream(Events *ev, void **out) {
    PyObject *s = PyObject_CallOneArg(ev->stream, ev->device);
    if (s == NULL) return -1;
    *out = PyLong_AsVoidPtr(s);
    Py_DECREF(s);
    return PyErr_Occurred() ? -1 : 0;
}

static int ev_grow_free(Events *ev) {
    if (ev->nfree < ev->cap_free) return 0;
    Py_ssize_t cap = ev->cap_free ? 2 * ev->cap_free : 64;
    void **f = PyMem_Realloc(ev->free, cap * sizeof(void *));
    if (f == NULL) return -1;
    ev->free = f;
    ev->cap_free = cap;
    return 0;
}

/* An event from the pool (made when it ran dry: counted); NULL on a CUDA
   error (*r says which). */
static void *ev_take(Events *ev, cu_result *r) {
    *r = CU_OK;
    if (ev->nfree > 0) return ev->free[--ev->nfree];
    void *e = NULL;
    if ((*r = cu.create(&e, 0)) != CU_OK) return NULL;
    ev->created++;
    return e;
}

static void ev_give(Events *ev, void *e) {
    if (ev_grow_free(ev) == 0) ev->free[ev->nfree++] = e;
    else cu.destroy(e); /* no memory for the stack: let the event go */
}

/* Queue a recorded pair; the oldest is dropped (its events reused) when
   the queue is full: memory stays bounded where no flusher reads. */
static void ev_push(Events *ev, long long batch, void *e0, void *e1, long long host) {
    if (ev->n == ev->cap) {
        ev_pair *o = &ev->q[ev->head];
        ev_give(ev, o->e0);
        ev_give(ev, o->e1);
        ev->head = (ev->head + 1) % ev->cap;
        ev->n--;
        ev->dropped++;
    }
    ev_pair *p = &ev->q[(ev->head + ev->n) % ev->cap];
    p->batch = batch;
    p->e0 = e0;
    p->e1 = e1;
    p->host = host;
    ev->n++;
}

/* Stop recording and tell gpu.py why (holding any current exception). */
static void ev_failed(Events *ev, const char *what, cu_result r) {
    ev->on = 0;
    saved_exc e;
    exc_save(&e);
    PyObject *msg = PyUnicode_FromFormat("%s failed: CUDA driver error %d", what, r);
    PyObject *res = msg ? PyObject_CallOneArg(ev->fail, msg) : NULL;
    Py_XDECREF(msg);
    Py_XDECREF(res);
    PyErr_Clear();
    exc_restore(&e);
}

static PyObject *events_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"lib", "pool", "max_pending", "stream", "device", "fail", NULL};
    const char *lib;
    Py_ssize_t pool, maxp;
    PyObject *stream, *device, *fail;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "snnOOO", names, &lib, &pool, &maxp, &stream, &device, &fail))
        return NULL;
    if (pool < 2 || maxp < 1 || !PyCallable_Check(stream) || !PyCallable_Check(fail)) {
        PyErr_SetString(PyExc_ValueError, "Events(lib, pool >= 2, max_pending >= 1, stream, device, fail)");
        return NULL;
    }
    const char *why = cu_load(lib);
    if (why != NULL) {
        const char *dl = dlerror();
        PyErr_Format(PyExc_RuntimeError, "%s: %s%s%s", lib, why, dl ? ": " : "", dl ? dl : "");
        return NULL;
    }
    void *ctx = NULL;
    cu_result r = cu.ctx_get(&ctx);
    if (r != CU_OK || ctx == NULL) {
        PyErr_Format(PyExc_RuntimeError, "no CUDA context current on the installing thread (cuCtxGetCurrent: %d)", r);
        return NULL;
    }
    Events *ev = (Events *)type->tp_alloc(type, 0);
    if (ev == NULL) return NULL;
    ev->ctx = ctx;
    ev->stream = Py_NewRef(stream);
    ev->device = Py_NewRef(device);
    ev->fail = Py_NewRef(fail);
    ev->cap = maxp;
    ev->q = PyMem_Calloc(maxp, sizeof(ev_pair));
    if (ev->q == NULL) {
        Py_DECREF(ev);
        return PyErr_NoMemory();
    }
    void *s;
    if (ev_stream(ev, &s) < 0) {
        Py_DECREF(ev);
        return NULL;
    }
    /* The pool: each event made and recorded once here (CUDA sets an event
       up at its first record: not on the hot path), then waited for. */
    void *last = NULL;
    for (Py_ssize_t i = 0; i < pool; i++) {
        void *e = NULL;
        if ((r = cu.create(&e, 0)) != CU_OK || (r = cu.record(e, s)) != CU_OK) {
            if (e) cu.destroy(e);
            Py_DECREF(ev);
            PyErr_Format(PyExc_RuntimeError, "making the pool's event %zd: CUDA driver error %d", i, r);
            return NULL;
        }
        if (ev_grow_free(ev) < 0) {
            cu.destroy(e);
            Py_DECREF(ev);
            return PyErr_NoMemory();
        }
        ev->free[ev->nfree++] = last = e;
    }
    float ms = -1;
    if ((r = cu.sync(last)) != CU_OK || (r = cu.query(ev->free[0])) != CU_OK ||
        (r = cu.elapsed(&ms, ev->free[0], last)) != CU_OK || !(ms >= 0)) {
        Py_DECREF(ev);
        PyErr_Format(PyExc_RuntimeError, "the pool's first and last events do not time (CUDA driver error %d)", r);
        return NULL;
    }
    ev->on = 1;
    return (PyObject *)ev;
}

/* read() -> [(batch, span ns, host ns)] of the completed pairs, oldest
   first, up to the first not complete (one stream: later ones are not
   either); a pair whose span cannot be read is dropped (span None). On the
   calling thread, torch's context is made current around the reads. */
static PyObject *events_read(Events *ev, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (out == NULL || ev->n == 0) return out;
    if (cu.ctx_push(ev->ctx) != CU_OK) return out; /* nothing readable here now; the next flush tries again */
    while (ev->n > 0) {
        ev_pair *p = &ev->q[ev->head];
        cu_result r = cu.query(p->e1);
        if (r == CU_NOT_READY) break;
        float ms = 0;
        PyObject *span = Py_None;
        if (r == CU_OK && cu.elapsed(&ms, p->e0, p->e1) == CU_OK) {
            long long ns = (long long)(ms * 1e6);
            span = PyLong_FromLongLong(ns > 1 ? ns : 1);
        } else {
            Py_INCREF(span);
        }
        PyObject *item = span ? Py_BuildValue("(LNL)", p->batch, span, p->host) : NULL;
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(item);
        ev_give(ev, p->e0);
        ev_give(ev, p->e1);
        ev->head = (ev->head + 1) % ev->cap;
        ev->n--;
    }
    void *prev;
    cu.ctx_pop(&prev);
    return out;
}

static PyObject *events_clear(Events *ev, PyObject *unused) {
    while (ev->n > 0) {
        ev_pair *p = &ev->q[ev->head];
        ev_give(ev, p->e0);
        ev_give(ev, p->e1);
        ev->head = (ev->head + 1) % ev->cap;
        ev->n--;
    }
    Py_RETURN_NONE;
}

static int events_traverse(Events *ev, visitproc visit, void *arg) {
    Py_VISIT(ev->stream);
    Py_VISIT(ev->device);
    Py_VISIT(ev->fail);
    return 0;
}

static int events_clear_refs(Events *ev) {
    Py_CLEAR(ev->stream);
    Py_CLEAR(ev->device);
    Py_CLEAR(ev->fail);
    return 0;
}

/* The events themselves are kept: a pair may still be in the stream, and
   the process (the engine) ends with its context. */
static void events_dealloc(Events *ev) {
    PyObject_GC_UnTrack(ev);
    events_clear_refs(ev);
    PyMem_Free(ev->q);
    PyMem_Free(ev->free);
    Py_TYPE(ev)->tp_free((PyObject *)ev);
}

static PyMethodDef events_methods[] = {
    {"read", (PyCFunction)events_read, METH_NOARGS, "read() -> [(batch, span ns or None, host ns)] completed"},
    {"clear", (PyCFunction)events_clear, METH_NOARGS, "clear(): forget every queued pair"},
    {NULL}};

static PyMemberDef events_members[] = {
    {"on", T_INT, offsetof(Events, on), 0, "recording (set 0 to stop)"},
    {"pending", T_PYSSIZET, offsetof(Events, n), READONLY, "pairs queued unread"},
    {"free", T_PYSSIZET, offsetof(Events, nfree), READONLY, "events ready for reuse"},
    {"dropped", T_LONGLONG, offsetof(Events, dropped), READONLY, "pairs dropped unread"},
    {"created", T_LONGLONG, offsetof(Events, created), READONLY, "events made after the pool"},
    {NULL}};

static PyTypeObject EventsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mbench_vllm._fastwrap.Events",
    .tp_basicsize = sizeof(Events),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Events(lib, pool, max_pending, stream, device, fail): the GPU timer's CUDA events.",
    .tp_new = events_new,
    .tp_dealloc = (destructor)events_dealloc,
    .tp_traverse = (traverseproc)events_traverse,
    .tp_clear = (inquiry)events_clear_refs,
    .tp_methods = events_methods,
    .tp_members = events_members,
};

/* The GPU timer's sampling gate (gpu.py's _wrap_forward, its Python twin):
   a random 1 in `every` calls go to the timed wrapper (hook), the others to
   the method itself. xorshift64* (Vigna 2016): one multiply per call. */
static PyObject *gate_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    unsigned long long x = t->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t->rng = x;
    if (x * 0x2545F4914F6CDD1DULL < t->cut) return PyObject_Vectorcall(t->hook, args, nargsf, kwnames);
    PASS();
}

/* The GPU timer's timed forward (gpu.py's _timed_forward, on the CUDA
   driver's events: _fastwrap_events.h): the start event on torch's current
   stream, the call, whether the GPU had reached the start event when the
   launch ended (and the launch's host ns), the end event, the pair queued
   with the batch being launched. A CUDA error stops the timer (gpu.py's
   fail says why) and never the forward. */
static PyObject *fwd_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Events *ev = (Events *)t->seen;
    if (!ev->on) PASS();
    void *s;
    if (ev_stream(ev, &s) < 0) {
        PyErr_Clear();
        ev_failed(ev, "reading torch's current stream", -1);
        PASS();
    }
    cu_result r;
    void *e0 = ev_take(ev, &r), *e1 = e0 ? ev_take(ev, &r) : NULL;
    if (e1 == NULL) {
        if (e0) ev_give(ev, e0);
        ev_failed(ev, "cuEventCreate", r);
        PASS();
    }
    long long t0 = now_ns(); /* before the record: the span cannot start earlier */
    if ((r = cu.record(e0, s)) != CU_OK) {
        ev_give(ev, e0);
        ev_give(ev, e1);
        ev_failed(ev, "cuEventRecord", r);
        PASS();
    }
    PyObject *res = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    long long host = now_ns() - t0;
    r = cu.query(e0);
    if (r == CU_NOT_READY) host = 0; /* the GPU was behind: every kernel queued before it got there */
    if ((r != CU_OK && r != CU_NOT_READY) || (r = cu.record(e1, s)) != CU_OK) {
        ev_give(ev, e0);
        ev_give(ev, e1);
        ev_failed(ev, "cuEventQuery/cuEventRecord", r);
        return res;
    }
    ev_push(ev, t->st->batch_seq, e0, e1, host);
    return res;
}

#endif
