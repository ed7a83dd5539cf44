/* _fastwrap_state.h: the hook state (Core) and the ring of step records
 * (Ring) of _fastwrap.c, whose comment says what they are. Included once,
 * by _fastwrap.c (one translation unit: native.py compiles that file). */
#ifndef MBENCH_FASTWRAP_STATE_H
#define MBENCH_FASTWRAP_STATE_H

#define FASTWRAP_ABI 3

/* Slots of a step record: steplog.py's S_* (checked by native.py). */
enum { S_HDR, S_TS, S_DUR, S_SCHED, S_META, S_EXEC, S_UPD, S_GF, S_LAUNCH, S_WAIT, S_GPU, S_BATCH,
       S_RUN, S_WAITING, S_TOTAL, S_DEC, S_FLAGS, S_PID, STEP_SLOTS };
#define STEP_BYTES ((Py_ssize_t)(STEP_SLOTS * sizeof(long long)))

/* What a Timer times (hooks.py: wrap_step, wrap_schedule, ...). */
enum { K_STEP, K_SCHED, K_META, K_UPDATE, K_LAUNCH, K_WAIT, K_GF, K_GATE, K_FWD, K_COUNT };

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ------------------------------------------------------------------ Core */

typedef struct {
    PyObject_HEAD
    char in_step, in_sched, in_meta, in_update, in_gf, in_launch, in_wait, core_process;
    unsigned long step_thread;
    long long t_step, t_sched_end, batch_seq, gf_ns, gf_n;
    PyObject *sched_out, *writer, *step_log, *acc_obj, *tmpl_obj;
    Py_buffer acc, tmpl[2];
    int have_acc, have_tmpl;
} Core;

static int take_buffer(PyObject *o, Py_buffer *view, Py_ssize_t min_len, int writable, const char *what) {
    if (PyObject_GetBuffer(o, view, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len < min_len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need %zd", what, view->len, min_len);
        return -1;
    }
    return 0;
}

static void core_drop_buffers(Core *c) {
    if (c->have_acc) PyBuffer_Release(&c->acc);
    if (c->have_tmpl) {
        PyBuffer_Release(&c->tmpl[0]);
        PyBuffer_Release(&c->tmpl[1]);
    }
    c->have_acc = c->have_tmpl = 0;
}

static PyObject *core_get_acc(Core *c, void *closure) {
    return Py_NewRef(c->acc_obj ? c->acc_obj : Py_None);
}

static int core_set_acc(Core *c, PyObject *v, void *closure) {
    Py_buffer view;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "acc cannot be deleted");
        return -1;
    }
    if (take_buffer(v, &view, STEP_BYTES, 1, "acc") < 0) return -1;
    if (c->have_acc) PyBuffer_Release(&c->acc);
    c->acc = view;
    c->have_acc = 1;
    Py_XSETREF(c->acc_obj, Py_NewRef(v));
    return 0;
}

static PyObject *core_get_tmpl(Core *c, void *closure) {
    return Py_NewRef(c->tmpl_obj ? c->tmpl_obj : Py_None);
}

/* tmpl: [step() path record template, batch-queue path template]. */
static int core_set_tmpl(Core *c, PyObject *v, void *closure) {
    Py_buffer a, b;
    PyObject *x, *y;
    if (v == NULL || !PySequence_Check(v) || PySequence_Size(v) != 2) {
        PyErr_SetString(PyExc_TypeError, "tmpl must be a sequence of two records");
        return -1;
    }
    if (!(x = PySequence_GetItem(v, 0))) return -1;
    if (!(y = PySequence_GetItem(v, 1))) {
        Py_DECREF(x);
        return -1;
    }
    int ok = take_buffer(x, &a, STEP_BYTES, 0, "tmpl[0]") == 0;
    if (ok && take_buffer(y, &b, STEP_BYTES, 0, "tmpl[1]") < 0) {
        PyBuffer_Release(&a);
        ok = 0;
    }
    Py_DECREF(x);
    Py_DECREF(y);
    if (!ok) return -1;
    if (c->have_tmpl) {
        PyBuffer_Release(&c->tmpl[0]);
        PyBuffer_Release(&c->tmpl[1]);
    }
    c->tmpl[0] = a;
    c->tmpl[1] = b;
    c->have_tmpl = 1;
    Py_XSETREF(c->tmpl_obj, Py_NewRef(v));
    return 0;
}

static int core_traverse(Core *c, visitproc visit, void *arg) {
    Py_VISIT(c->sched_out);
    Py_VISIT(c->writer);
    Py_VISIT(c->step_log);
    Py_VISIT(c->acc_obj);
    Py_VISIT(c->tmpl_obj);
    return 0;
}

static int core_clear(Core *c) {
    core_drop_buffers(c);
    Py_CLEAR(c->sched_out);
    Py_CLEAR(c->writer);
    Py_CLEAR(c->step_log);
    Py_CLEAR(c->acc_obj);
    Py_CLEAR(c->tmpl_obj);
    return 0;
}

static void core_dealloc(Core *c) {
    PyObject_GC_UnTrack(c);
    core_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

#define M(name, type) {#name, type, offsetof(Core, name), 0, NULL}
static PyMemberDef core_members[] = {
    M(in_step, T_BOOL), M(in_sched, T_BOOL), M(in_meta, T_BOOL), M(in_update, T_BOOL),
    M(in_gf, T_BOOL), M(in_launch, T_BOOL), M(in_wait, T_BOOL), M(core_process, T_BOOL),
    M(step_thread, T_ULONG), M(t_step, T_LONGLONG), M(t_sched_end, T_LONGLONG),
    M(batch_seq, T_LONGLONG), M(gf_ns, T_LONGLONG), M(gf_n, T_LONGLONG),
    M(sched_out, T_OBJECT), M(step_log, T_OBJECT),
    {"_writer", T_OBJECT, offsetof(Core, writer), 0, NULL},
    {NULL}};
#undef M

static PyGetSetDef core_getset[] = {
    {"acc", (getter)core_get_acc, (setter)core_set_acc, "the step's record (array('q'))", NULL},
    {"tmpl", (getter)core_get_tmpl, (setter)core_set_tmpl, "record templates [step, batch queue]", NULL},
    {NULL}};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mbench_vllm._fastwrap.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Hook state of a process (the base of _recorder.State).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_members = core_members,
    .tp_getset = core_getset,
};

/* ------------------------------------------------------------------ Ring */

typedef struct {
    PyObject_HEAD
    long long n, done, dropped, last_flush_ns, last_poke_ns, wake_at, interval_ns, records;
    char woken;
    PyObject *mixed, *buf_obj;
    Py_buffer buf;
    int have_buf;
} Ring;

static PyObject *ring_get_buf(Ring *r, void *closure) {
    return Py_NewRef(r->buf_obj ? r->buf_obj : Py_None);
}

static int ring_set_buf(Ring *r, PyObject *v, void *closure) {
    Py_buffer view;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "buf cannot be deleted");
        return -1;
    }
    if (take_buffer(v, &view, STEP_BYTES, 1, "buf") < 0) return -1;
    long long recs = view.len / STEP_BYTES;
    if (view.len % STEP_BYTES || (recs & (recs - 1))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "buf must hold a power of two of step records");
        return -1;
    }
    if (r->have_buf) PyBuffer_Release(&r->buf);
    r->buf = view;
    r->have_buf = 1;
    r->records = recs;
    Py_XSETREF(r->buf_obj, Py_NewRef(v));
    return 0;
}

static int ring_traverse(Ring *r, visitproc visit, void *arg) {
    Py_VISIT(r->mixed);
    Py_VISIT(r->buf_obj);
    return 0;
}

static int ring_clear(Ring *r) {
    if (r->have_buf) PyBuffer_Release(&r->buf);
    r->have_buf = 0;
    r->records = 0;
    Py_CLEAR(r->mixed);
    Py_CLEAR(r->buf_obj);
    return 0;
}

static void ring_dealloc(Ring *r) {
    PyObject_GC_UnTrack(r);
    ring_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

#define M(name, type) {#name, type, offsetof(Ring, name), 0, NULL}
static PyMemberDef ring_members[] = {
    M(n, T_LONGLONG), M(done, T_LONGLONG), M(dropped, T_LONGLONG), M(last_flush_ns, T_LONGLONG),
    M(last_poke_ns, T_LONGLONG), M(wake_at, T_LONGLONG), M(interval_ns, T_LONGLONG),
    M(woken, T_BOOL), M(mixed, T_OBJECT), {NULL}};
#undef M

static PyGetSetDef ring_getset[] = {
    {"buf", (getter)ring_get_buf, (setter)ring_set_buf, "the ring's bytes (RING step records)", NULL},
    {NULL}};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mbench_vllm._fastwrap.Ring",
    .tp_basicsize = sizeof(Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A ring of binary step records (the base of _recorder.StepLog).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)ring_dealloc,
    .tp_traverse = (traverseproc)ring_traverse,
    .tp_clear = (inquiry)ring_clear,
    .tp_members = ring_members,
    .tp_getset = ring_getset,
};

/* StepLog.put: -1 when the ring is full (the record is dropped, counted). */
static long long ring_put(Ring *r, const long long *acc) {
    long long n = r->n;
    if (!r->have_buf || n - r->done >= r->records) {
        r->dropped++;
        return -1;
    }
    memcpy((char *)r->buf.buf + (n & (r->records - 1)) * STEP_BYTES, acc, STEP_BYTES);
    r->n = n + 1;
    return n;
}
#endif
