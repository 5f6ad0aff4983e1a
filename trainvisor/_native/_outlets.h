/* Where a pump's bytes go besides the pipeline: trainvisor's own stdout/stderr (fd 2 through
 * the line gate) and the run log. Written from the pump threads without the interpreter lock,
 * so these are C objects with C locks; Python sees them as `_pump.LineGate` and `_pump.RunLog`
 * (the same behaviour as stderr_gate.LineGate and supervisor.readers.RunLog, which stay the
 * pure-Python fallback). Included by _pump.c only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* write() until all is written; 0 or the errno. A non-blocking fd someone else left that way
 * (the fd is shared) is waited on, as stderr_gate.write_all does. */
static int write_all_fd(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                struct pollfd w = {fd, POLLOUT, 0};
                poll(&w, 1, 1000);
                continue;
            }
            return errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void init_monotonic_cond(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

/* ---- the line gate: the training's stderr and trainvisor's messages on one fd ---- */

typedef struct {
    PyObject_HEAD
    int fd;
    double wait;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* broadcast when waiting messages are written */
    int at_line_start;
    char *pending; /* messages waiting for a line start, in order */
    size_t npending, cap;
    long long said, written;
} Gate;

/* Every waiting message after `lead`, under the lock; a write error drops them, quietly. */
static void gate_flush(Gate *g, const char *lead) {
    if (*lead) write_all_fd(g->fd, lead, strlen(lead));
    if (g->npending) write_all_fd(g->fd, g->pending, g->npending);
    g->npending = 0;
    g->written = g->said;
    pthread_cond_broadcast(&g->cond);
}

/* The training's bytes to `fd` (no interpreter lock needed): waiting messages go out right after
 * the chunk's last newline (searched in its last 4 KiB), inside the chunk if need be. */
static int gate_pass(Gate *g, int fd, const char *d, size_t n) {
    if (fd != g->fd) return write_all_fd(fd, d, n);
    if (!n) return 0;
    int err = 0;
    pthread_mutex_lock(&g->mu);
    if (g->npending) {
        size_t lo = n > 4096 ? n - 4096 : 0;
        const char *nl = memrchr(d + lo, '\n', n - lo);
        if (nl) {
            size_t cut = (size_t)(nl - d) + 1;
            err = write_all_fd(fd, d, cut);
            if (!err) gate_flush(g, "");
            g->at_line_start = 1;
            d += cut;
            n -= cut;
        }
    }
    if (n && !err) {
        err = write_all_fd(fd, d, n);
        g->at_line_start = d[n - 1] == '\n';
    }
    pthread_mutex_unlock(&g->mu);
    return err;
}

static int gate_append(Gate *g, const char *d, size_t n) {
    if (g->npending + n > g->cap) {
        size_t cap = (g->npending + n) * 2;
        char *p = realloc(g->pending, cap);
        if (!p) return -1;
        g->pending = p;
        g->cap = cap;
    }
    memcpy(g->pending + g->npending, d, n);
    g->npending += n;
    return 0;
}

/* Waits (lock held) until message `mine` is written or `wait` seconds pass; then writes it on a
 * line of its own: the training leaves its line open (a bar redrawn for a whole epoch). */
static void gate_wait_turn(Gate *g, long long mine) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double end = until.tv_sec + until.tv_nsec / 1e9 + g->wait;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    while (g->written < mine)
        if (pthread_cond_timedwait(&g->cond, &g->mu, &until) == ETIMEDOUT) break;
    if (g->written < mine) {
        gate_flush(g, g->at_line_start ? "" : "\n");
        g->at_line_start = 1;
    }
}

static PyObject *Gate_say(Gate *g, PyObject *text) {
    PyObject *enc = PyUnicode_AsEncodedString(text, "utf-8", "backslashreplace");
    if (!enc) return NULL;
    const char *d = PyBytes_AS_STRING(enc);
    size_t n = (size_t)PyBytes_GET_SIZE(enc);
    int fail = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g->mu);
    int now = g->at_line_start && !g->npending;
    fail = gate_append(g, d, n) || ((n == 0 || d[n - 1] != '\n') && gate_append(g, "\n", 1));
    long long mine = ++g->said;
    pthread_cond_broadcast(&g->cond); /* whoever watches `waiting` (a test) sees it change */
    if (now) gate_flush(g, "");
    else gate_wait_turn(g, mine);
    pthread_mutex_unlock(&g->mu);
    Py_END_ALLOW_THREADS
    Py_DECREF(enc);
    if (fail) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *Gate_pass_through(Gate *g, PyObject *args) {
    int fd;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "iy*", &fd, &b)) return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = gate_pass(g, fd, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (err) return PyErr_SetFromErrno((errno = err, PyExc_OSError));
    Py_RETURN_NONE;
}

static PyObject *Gate_waiting(Gate *g, void *closure) {
    (void)closure;
    long long n;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g->mu);
    n = g->said - g->written;
    pthread_mutex_unlock(&g->mu);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(n);
}

static int Gate_init(Gate *g, PyObject *args, PyObject *kw) {
    static char *names[] = {"fd", "wait", NULL};
    g->wait = 1.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|$d", names, &g->fd, &g->wait)) return -1;
    g->at_line_start = 1;
    pthread_mutex_init(&g->mu, NULL);
    init_monotonic_cond(&g->cond);
    return 0;
}

static void Gate_dealloc(Gate *g) {
    free(g->pending);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyMethodDef Gate_methods[] = {
    {"say", (PyCFunction)Gate_say, METH_O, "Write text (whole lines) at a line start of the stream."},
    {"pass_through", (PyCFunction)Gate_pass_through, METH_VARARGS, "The training's bytes to fd, as they are."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Gate_getset[] = {
    {"waiting", (getter)Gate_waiting, NULL, "Messages waiting for a line start now.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef Gate_members[] = {{"fd", T_INT, offsetof(Gate, fd), READONLY, NULL}, {NULL, 0, 0, 0, NULL}};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainvisor._native._pump.LineGate",
    .tp_basicsize = sizeof(Gate), .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Gate_init, .tp_dealloc = (destructor)Gate_dealloc, .tp_methods = Gate_methods,
    .tp_getset = Gate_getset, .tp_members = Gate_members,
    .tp_doc = "One output fd shared by the training's pass-through and trainvisor's own messages."};

/* ---- the run log: both streams in one file, interleaved by whole lines ---- */

typedef struct {
    PyObject_HEAD
    int fd;
    Py_ssize_t hold;
    pthread_mutex_t mu;
    int err; /* the first write error: the log is given up, the pass-through goes on */
} RunLogC;

/* Two pieces written together under the log's lock (a stream's held part line and its end). */
static void runlog_write(RunLogC *lg, const char *a, size_t na, const char *b, size_t nb) {
    pthread_mutex_lock(&lg->mu);
    if (!lg->err) lg->err = write_all_fd(lg->fd, a, na);
    if (!lg->err && nb) lg->err = write_all_fd(lg->fd, b, nb);
    pthread_mutex_unlock(&lg->mu);
}

static int RunLog_init(RunLogC *lg, PyObject *args, PyObject *kw) {
    static char *names[] = {"fd", "hold", NULL};
    lg->hold = 64 * 1024;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|$n", names, &lg->fd, &lg->hold)) return -1;
    pthread_mutex_init(&lg->mu, NULL);
    return 0;
}

static PyObject *RunLog_failed(RunLogC *lg, void *closure) {
    (void)closure;
    return PyBool_FromLong(lg->err != 0);
}

static PyGetSetDef RunLog_getset[] = {
    {"failed", (getter)RunLog_failed, NULL, "Whether a write failed (the log was given up).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject RunLogType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainvisor._native._pump.RunLog",
    .tp_basicsize = sizeof(RunLogC), .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RunLog_init, .tp_getset = RunLog_getset,
    .tp_doc = "The child's streams in one file, interleaved by whole lines; written by the pumps."};
