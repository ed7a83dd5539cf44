/* _fastwrap: the step timer's engine-thread hot path in C.
 *
 * Optional. mbench_vllm/native.py compiles this file where a C compiler and
 * Python's headers exist (Python 3.9+, written against 3.11 and 3.12) and
 * loads it; without it hooks.py uses its Python wrappers, which do the same
 * work in the same order (hooks.py's docstrings are the semantics; this file
 * follows them line for line).
 *
 * Three types:
 *
 *   Core   the base class of _recorder.State: the per-process hook state
 *          (re-entrancy guards, the step's record `acc` and its templates,
 *          batch ids) as C fields, so Python code reads and writes them as
 *          ordinary attributes and the timers below reach them directly.
 *   Ring   the base class of _recorder.StepLog: the ring of binary step
 *          records (`buf`) and its counters.
 *   Timer  a callable that wraps one vLLM method: a vectorcall that checks
 *          the guards, reads CLOCK_MONOTONIC (the clock of
 *          time.perf_counter_ns on Linux) around the call and adds the
 *          difference into its slot of `acc`. One kind (K_GATE) times
 *          nothing: it is the GPU timer's sampling gate (gpu.py), which
 *          sends a random 1 in `every` calls to its hook (the timed
 *          wrapper) and the others straight to the method; another
 *          (K_FWD) is that timed wrapper on CUDA events of its own
 *          (_fastwrap_events.h). It is a method descriptor
 *          (Py_TPFLAGS_METHOD_DESCRIPTOR), so obj.method(...) calls it with
 *          no bound-method object, like a Python function.
 *
 * The step Timer also writes the step's record (the work of State.emit):
 * queue lengths, token counts, the copy into the ring. It calls back into
 * Python only for what is rare: an engine set up late, a future class not
 * seen before, a failed batch tag, the flusher to wake, a get_finished
 * timed outside the engine process, a mixed batch's token dicts kept for
 * the flusher. All of it runs holding the GIL, as the Python wrappers do.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <time.h>

#include "_fastwrap_state.h"

static PyObject *s_scheduler, *s_running, *s_waiting, *s_total, *s_nst, *s_spec, *s_batch,
    *s_sched_output, *s_ready, *s_writer, *s_emit, *s_poke, *s_problem, *s_append;

/* ----------------------------------------------------------------- Timer */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *func;  /* the wrapped callable */
    Core *st;        /* STATE */
    int kind, bq;    /* what it times; the step's path (step Timer) */
    PyObject *hook;  /* the rare-case callback (see kinds) */
    PyObject *seen;  /* launch: the set of result classes already looked at */
    PyObject *sched_type; /* step: the class of the engine's scheduler when last hooked */
    PyObject *dict;  /* __wrapped__, __name__, the wrapped mark */
    unsigned long long rng, cut; /* gate: xorshift64* state; a draw below cut goes to hook */
} Timer;

#define ACC(st) ((long long *)(st)->acc.buf)
#define PASS() return PyObject_Vectorcall(t->func, args, nargsf, kwnames)

/* The current exception, kept across a callback (3.12 deprecates Fetch). */
typedef struct { PyObject *a, *b, *c; } saved_exc;
static void exc_save(saved_exc *s) {
#if PY_VERSION_HEX >= 0x030C0000
    s->a = PyErr_GetRaisedException();
    s->b = s->c = NULL;
#else
    PyErr_Fetch(&s->a, &s->b, &s->c);
    if (s->a != NULL) PyErr_NormalizeException(&s->a, &s->b, &s->c);
#endif
}
static void exc_restore(saved_exc *s) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(s->a);
#else
    PyErr_Restore(s->a, s->b, s->c);
#endif
}

/* After a call: the duration into slot `slot` (when the record exists). */
static inline void add(Core *st, int slot, long long d) {
    if (st->have_acc) ACC(st)[slot] += d;
}

static int emit(Core *st, PyObject *engine, long long t0, long long t1);

/* wrap_step: one engine step (EngineCore.step / step_with_batch_queue). */
static PyObject *step_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Core *st = t->st;
    if (st->in_step || PyVectorcall_NARGS(nargsf) < 1) PASS();
    PyObject *self = args[0];
    PyObject *d = PyObject_GenericGetDict(self, NULL);
    if (d == NULL) {
        PyErr_Clear(); /* no instance dict: not an engine the plugin sets up */
    } else {
        int ready = PyDict_Contains(d, s_ready);
        /* Whatever EngineCore.scheduler holds now, whatever its class (one
           installed after the engine was built included): a class not seen
           at the last step goes to the hook, which hooks it. */
        PyObject *sched = ready < 0 ? NULL : PyDict_GetItemWithError(d, s_scheduler); /* borrowed */
        int stale = sched != NULL && (PyObject *)Py_TYPE(sched) != t->sched_type;
        if (ready < 0 || (sched == NULL && PyErr_Occurred())) {
            Py_DECREF(d);
            return NULL;
        }
        if (!ready || stale) { /* not set up at construction, or a new scheduler class: hook it now */
            PyObject *r = PyObject_CallOneArg(t->hook, self);
            if (r == NULL) {
                Py_DECREF(d);
                return NULL;
            }
            Py_DECREF(r);
            sched = PyDict_GetItemWithError(d, s_scheduler);
            if (sched == NULL && PyErr_Occurred()) {
                Py_DECREF(d);
                return NULL;
            }
            Py_XSETREF(t->sched_type, sched ? Py_NewRef((PyObject *)Py_TYPE(sched)) : NULL);
        }
        Py_DECREF(d);
    }
    if (!st->have_acc || !st->have_tmpl) PASS();
    st->in_step = 1;
    st->step_thread = PyThread_get_thread_ident();
    memcpy(st->acc.buf, st->tmpl[t->bq].buf, STEP_BYTES);
    st->t_sched_end = 0;
    Py_CLEAR(st->sched_out);
    long long t0 = st->t_step = now_ns();
    PyObject *res = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    long long t1 = now_ns();
    st->in_step = 0;
    if (res != NULL && st->step_log != NULL && st->step_log != Py_None && st->have_acc) {
        if (emit(st, self, t0, t1) < 0) Py_CLEAR(res);
    }
    return res;
}

/* State.emit: the record of the step that ran from t0 to t1 into the ring. */
static int emit(Core *st, PyObject *engine, long long t0, long long t1) {
    PyObject *w = st->writer;
    if (w == NULL || w == Py_None) { /* the first step: State.writer() creates the log */
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)st, s_writer);
        if (r == NULL) return -1;
        Py_DECREF(r);
        w = st->writer;
    }
    if (w == NULL || !PyObject_TypeCheck(w, &RingType)) { /* not a C ring: the Python emit */
        PyObject *a = PyLong_FromLongLong(t0), *b = PyLong_FromLongLong(t1);
        PyObject *r = a && b ? PyObject_CallMethodObjArgs((PyObject *)st, s_emit, engine, a, b, NULL) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    Ring *ring = (Ring *)w;
    long long *acc = ACC(st);
    acc[S_TS] = t1;
    acc[S_DUR] = t1 - t0;
    if (st->gf_n) { /* get_finished of another thread, since the last record */
        acc[S_GF] += st->gf_ns;
        st->gf_ns = st->gf_n = 0;
    }
    PyObject *sched = PyObject_GetAttr(engine, s_scheduler);
    if (sched != NULL) {
        PyObject *run = PyObject_GetAttr(sched, s_running);
        PyObject *wait = run ? PyObject_GetAttr(sched, s_waiting) : NULL;
        Py_ssize_t nr = wait ? PyObject_Length(run) : -1;
        Py_ssize_t nw = nr >= 0 ? PyObject_Length(wait) : -1;
        if (nr >= 0 && nw >= 0) {
            acc[S_RUN] = nr;
            acc[S_WAITING] = nw;
        }
        Py_XDECREF(run);
        Py_XDECREF(wait);
        Py_DECREF(sched);
    }
    PyErr_Clear();
    /* O(1) here: a batch of one token per request (pure decode) is counted
       at once; otherwise the flusher counts, on the dicts vLLM built. */
    PyObject *nst = NULL, *spec = NULL, *out = st->sched_out;
    if (out != NULL && out != Py_None) {
        PyObject *tot = PyObject_GetAttr(out, s_total);
        long long total = tot ? PyLong_AsLongLong(tot) : -1;
        Py_XDECREF(tot);
        if (!PyErr_Occurred()) nst = PyObject_GetAttr(out, s_nst);
        if (nst != NULL) spec = PyObject_GetAttr(out, s_spec);
        int truth = spec ? PyObject_IsTrue(spec) : -1;
        Py_ssize_t len = truth >= 0 ? PyObject_Length(nst) : -1;
        if (len < 0) {
            PyErr_Clear();
            Py_CLEAR(nst);
            Py_CLEAR(spec);
        } else {
            if (!truth && total == len) {
                acc[S_DEC] = total;
                Py_CLEAR(nst);
            }
            acc[S_TOTAL] = total;
        }
    }
    long long k = ring_put(ring, acc);
    int rc = 0;
    if (k >= 0 && nst != NULL && ring->mixed != NULL) {
        PyObject *item = Py_BuildValue("(LOO)", k, nst, spec);
        PyObject *r = item ? PyObject_CallMethodOneArg(ring->mixed, s_append, item) : NULL;
        Py_XDECREF(item);
        if (r == NULL) rc = -1;
        Py_XDECREF(r);
    }
    Py_XDECREF(nst);
    Py_XDECREF(spec);
    if (rc < 0) return -1;
    /* Wake the flusher at WAKE_AT queued records; once a flush interval,
       let State._poke check that the flusher is alive. */
    long long backlog = ring->n - ring->done;
    int wake = backlog >= ring->wake_at && !ring->woken;
    if (wake || (t1 - ring->last_flush_ns >= ring->interval_ns && t1 - ring->last_poke_ns >= ring->interval_ns)) {
        if (wake) ring->woken = 1;
        ring->last_poke_ns = t1;
        PyObject *now = PyLong_FromLongLong(t1);
        PyObject *r = now ? PyObject_CallMethodOneArg((PyObject *)st, s_poke, now) : NULL;
        Py_XDECREF(now);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* wrap_schedule: times schedule() and tags its output with a batch id. */
static PyObject *sched_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Core *st = t->st;
    if (st->in_sched || !st->in_step) PASS();
    st->in_sched = 1;
    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    long long t1 = now_ns();
    st->in_sched = 0;
    add(st, S_SCHED, t1 - t0);
    st->t_sched_end = t1;
    if (out == NULL) return NULL;
    Py_XSETREF(st->sched_out, Py_NewRef(out));
    PyObject *b = PyLong_FromLongLong(++st->batch_seq);
    if (b == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    if (PyObject_SetAttr(out, s_batch, b) < 0) { /* State.problem says so */
        saved_exc e;
        exc_save(&e);
        PyObject *exc = e.b ? e.b : e.a;
        PyObject *msg = PyUnicode_FromFormat("cannot tag %s: %R; gpu_us cannot be joined to steps",
                                             Py_TYPE(out)->tp_name, exc ? exc : Py_None);
        PyObject *hook = msg ? PyUnicode_FromString("batch id") : NULL;
        PyObject *r = hook ? PyObject_CallMethodObjArgs((PyObject *)st, s_problem, hook, msg, NULL) : NULL;
        Py_XDECREF(hook);
        Py_XDECREF(msg);
        Py_XDECREF(r);
        Py_XDECREF(e.a);
        Py_XDECREF(e.b);
        Py_XDECREF(e.c);
        PyErr_Clear();
    }
    Py_DECREF(b);
    return out;
}

/* wrap_meta, wrap_update, wrap_launch, wrap_result, wrap_get_finished. */
static PyObject *meta_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Core *st = t->st;
    if (st->in_meta || !st->in_step) PASS();
    st->in_meta = 1;
    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    add(st, S_META, now_ns() - t0);
    st->in_meta = 0;
    return out;
}

static PyObject *update_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Core *st = t->st;
    if (st->in_update || !st->in_step || !st->have_acc) PASS();
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *so = nargs >= 2 ? args[1] : NULL; /* (self, scheduler_output, ...) */
    if (so == NULL && kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, i), s_sched_output) == 0) {
                so = args[nargs + i];
                break;
            }
        }
    }
    long long batch = 0;
    if (so != NULL) {
        PyObject *v = PyObject_GetAttr(so, s_batch);
        if (v != NULL) {
            batch = PyObject_IsTrue(v) > 0 ? PyLong_AsLongLong(v) : 0;
            Py_DECREF(v);
        }
        if (PyErr_Occurred()) {
            PyErr_Clear();
            batch = 0;
        }
    }
    st->in_update = 1;
    ACC(st)[S_BATCH] = batch;
    long long t0 = now_ns();
    /* execute_us (step() path): from the end of schedule() in this call, or
       the step's start when it scheduled nothing. */
    ACC(st)[S_EXEC] += t0 - (st->t_sched_end ? st->t_sched_end : st->t_step);
    PyObject *out = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    add(st, S_UPD, now_ns() - t0);
    st->in_update = 0;
    return out;
}

static PyObject *launch_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Core *st = t->st;
    if (st->in_launch || !st->in_step) PASS();
    st->in_launch = 1;
    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    add(st, S_LAUNCH, now_ns() - t0);
    st->in_launch = 0;
    if (out == NULL) return NULL;
    /* A result class not seen before: hooks._time_future_class wraps its result(). */
    int seen = PySet_Contains(t->seen, (PyObject *)Py_TYPE(out));
    if (seen == 0) {
        PyObject *r = PyObject_CallOneArg(t->hook, (PyObject *)Py_TYPE(out));
        if (r == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(r);
    } else if (seen < 0) {
        PyErr_Clear();
    }
    return out;
}

static PyObject *wait_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Core *st = t->st;
    if (!st->in_step || st->in_wait || st->in_launch || PyThread_get_thread_ident() != st->step_thread) PASS();
    st->in_wait = 1;
    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    add(st, S_WAIT, now_ns() - t0);
    st->in_wait = 0;
    return out;
}

static PyObject *gf_vc(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timer *t = (Timer *)op;
    Core *st = t->st;
    if (st->in_gf) PASS();
    st->in_gf = 1;
    long long t0 = now_ns();
    PyObject *out = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    long long t1 = now_ns();
    st->in_gf = 0;
    if (st->in_step && PyThread_get_thread_ident() == st->step_thread) {
        add(st, S_GF, t1 - t0); /* the inline executor: into this step */
    } else if (st->core_process || st->in_step) {
        st->gf_ns += t1 - t0; /* an in-process worker thread: into the next record */
        st->gf_n++;
    } else { /* a worker process: State.record_get_finished writes its line */
        saved_exc e;
        exc_save(&e);
        PyObject *r = PyObject_CallFunction(t->hook, "LL", t1 - t0, t1);
        if (r == NULL) {
            Py_XDECREF(e.a);
            Py_XDECREF(e.b);
            Py_XDECREF(e.c);
            Py_XDECREF(out);
            return NULL;
        }
        Py_DECREF(r);
        exc_restore(&e);
    }
    return out;
}

/* The GPU timer: CUDA events, its gate and its timed forward. */
#include "_fastwrap_events.h"

static const vectorcallfunc kind_calls[K_COUNT] = {step_vc, sched_vc, meta_vc, update_vc, launch_vc, wait_vc, gf_vc,
                                                   gate_vc, fwd_vc};

static PyObject *timer_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"func", "state", "kind", "bq", "hook", "seen", "every", "seed", NULL};
    PyObject *func, *state, *hook = Py_None, *seen = Py_None;
    int kind, bq = 0;
    unsigned long long every = 0, seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!i|pOOKK", names, &func, &CoreType, &state, &kind, &bq,
                                     &hook, &seen, &every, &seed))
        return NULL;
    if (kind < 0 || kind >= K_COUNT || !PyCallable_Check(func)) {
        PyErr_SetString(PyExc_ValueError, "Timer(func, state, kind): func callable, kind a K_* constant");
        return NULL;
    }
    if ((kind == K_STEP || kind == K_LAUNCH || kind == K_GF || kind == K_GATE) && !PyCallable_Check(hook)) {
        PyErr_SetString(PyExc_ValueError, "this Timer kind needs a callable hook");
        return NULL;
    }
    if (kind == K_FWD && !PyObject_TypeCheck(seen, &EventsType)) {
        PyErr_SetString(PyExc_ValueError, "a forward Timer needs its Events (seen=)");
        return NULL;
    }
    if (kind == K_GATE && (every < 1 || seed == 0)) {
        PyErr_SetString(PyExc_ValueError, "a gate Timer needs every >= 1 and a nonzero seed");
        return NULL;
    }
    if (kind == K_LAUNCH && !PySet_Check(seen)) {
        PyErr_SetString(PyExc_ValueError, "a launch Timer needs the set of seen classes");
        return NULL;
    }
    Timer *t = (Timer *)type->tp_alloc(type, 0);
    if (t == NULL) return NULL;
    t->vectorcall = kind_calls[kind];
    t->func = Py_NewRef(func);
    t->st = (Core *)Py_NewRef(state);
    t->kind = kind;
    t->bq = bq ? 1 : 0;
    t->hook = Py_NewRef(hook);
    t->seen = Py_NewRef(seen);
    t->rng = seed;
    /* P(draw < cut) = 1/every: cut = 2^64 / every (every = 1: always). */
    t->cut = every <= 1 ? ~0ULL : (~0ULL / every) + 1;
    return (PyObject *)t;
}

static int timer_traverse(Timer *t, visitproc visit, void *arg) {
    Py_VISIT(t->func);
    Py_VISIT(t->st);
    Py_VISIT(t->hook);
    Py_VISIT(t->seen);
    Py_VISIT(t->sched_type);
    Py_VISIT(t->dict);
    return 0;
}

static int timer_clear(Timer *t) {
    Py_CLEAR(t->func);
    Py_CLEAR(t->st);
    Py_CLEAR(t->hook);
    Py_CLEAR(t->seen);
    Py_CLEAR(t->sched_type);
    Py_CLEAR(t->dict);
    return 0;
}

static void timer_dealloc(Timer *t) {
    PyObject_GC_UnTrack(t);
    timer_clear(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* A method descriptor, like a function: obj.name is a bound method. */
static PyObject *timer_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *timer_call(PyObject *self, PyObject *args, PyObject *kw) {
    if (((Timer *)self)->func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cleared Timer");
        return NULL;
    }
    return PyVectorcall_Call(self, args, kw);
}

/* copy.copy / copy.deepcopy of an object holding a Timer: the Timer itself,
   as for a function. */
static PyObject *timer_self(PyObject *self, PyObject *unused) {
    return Py_NewRef(self);
}

static PyMethodDef timer_methods[] = {
    {"__copy__", timer_self, METH_NOARGS, NULL},
    {"__deepcopy__", timer_self, METH_O, NULL},
    {NULL}};

static PyMemberDef timer_members[] = {
    {"kind", T_INT, offsetof(Timer, kind), READONLY, NULL},
    {NULL}};

static PyGetSetDef timer_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}};

static PyTypeObject TimerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mbench_vllm._fastwrap.Timer",
    .tp_basicsize = sizeof(Timer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Timer(func, state, kind, bq=False, hook=None, seen=None, every=0, seed=0): a timing wrapper of func.",
    .tp_new = timer_new,
    .tp_dealloc = (destructor)timer_dealloc,
    .tp_traverse = (traverseproc)timer_traverse,
    .tp_clear = (inquiry)timer_clear,
    .tp_call = timer_call,
    .tp_vectorcall_offset = offsetof(Timer, vectorcall),
    .tp_descr_get = timer_get,
    .tp_dictoffset = offsetof(Timer, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_methods = timer_methods,
    .tp_members = timer_members,
    .tp_getset = timer_getset,
};

/* ---------------------------------------------------------------- module */

static PyObject *fw_now(PyObject *mod, PyObject *unused) {
    return PyLong_FromLongLong(now_ns());
}

static PyMethodDef fw_methods[] = {
    {"now", fw_now, METH_NOARGS, "now(): CLOCK_MONOTONIC in ns (the clock of time.perf_counter_ns)"},
    {NULL}};

static struct PyModuleDef fw_module = {PyModuleDef_HEAD_INIT, "_fastwrap",
                                       "The step timer's engine-thread hot path (see _fastwrap.c).", -1,
                                       fw_methods};

PyMODINIT_FUNC PyInit__fastwrap(void) {
    struct { PyObject **s; const char *v; } strs[] = {
        {&s_scheduler, "scheduler"}, {&s_running, "running"}, {&s_waiting, "waiting"},
        {&s_total, "total_num_scheduled_tokens"}, {&s_nst, "num_scheduled_tokens"},
        {&s_spec, "scheduled_spec_decode_tokens"}, {&s_batch, "_mbench_batch"},
        {&s_sched_output, "scheduler_output"}, {&s_ready, "_mbench_hooked"}, {&s_writer, "writer"},
        {&s_emit, "emit"}, {&s_poke, "_poke"}, {&s_problem, "problem"}, {&s_append, "append"}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (!(*strs[i].s = PyUnicode_InternFromString(strs[i].v))) return NULL;
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&RingType) < 0 || PyType_Ready(&TimerType) < 0 ||
        PyType_Ready(&EventsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&fw_module);
    if (m == NULL) return NULL;
    PyObject *layout = Py_BuildValue("(iiiiiiiiiiiiiiiiii)", STEP_SLOTS, S_TS, S_DUR, S_SCHED, S_META, S_EXEC,
                                     S_UPD, S_GF, S_LAUNCH, S_WAIT, S_GPU, S_BATCH, S_RUN, S_WAITING, S_TOTAL,
                                     S_DEC, S_FLAGS, S_PID);
    if (layout == NULL || PyModule_AddObject(m, "LAYOUT", layout) < 0 ||
        PyModule_AddIntConstant(m, "ABI", FASTWRAP_ABI) < 0 ||
        PyModule_AddIntConstant(m, "K_STEP", K_STEP) < 0 || PyModule_AddIntConstant(m, "K_SCHED", K_SCHED) < 0 ||
        PyModule_AddIntConstant(m, "K_META", K_META) < 0 || PyModule_AddIntConstant(m, "K_UPDATE", K_UPDATE) < 0 ||
        PyModule_AddIntConstant(m, "K_LAUNCH", K_LAUNCH) < 0 || PyModule_AddIntConstant(m, "K_WAIT", K_WAIT) < 0 ||
        PyModule_AddIntConstant(m, "K_GF", K_GF) < 0 || PyModule_AddIntConstant(m, "K_GATE", K_GATE) < 0 ||
        PyModule_AddIntConstant(m, "K_FWD", K_FWD) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&CoreType);
    Py_INCREF(&RingType);
    Py_INCREF(&TimerType);
    Py_INCREF(&EventsType);
    if (PyModule_AddObject(m, "Events", (PyObject *)&EventsType) < 0 ||
        PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0 ||
        PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0 ||
        PyModule_AddObject(m, "Timer", (PyObject *)&TimerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
