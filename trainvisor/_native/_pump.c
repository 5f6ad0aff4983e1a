/* A pipe pump: the child's bytes to trainvisor's stdout/stderr without the interpreter lock.
 *
 * Why: a Python reader thread needs the interpreter lock after every read() and write(); while
 * the pipeline thread parses (the generic parser's progress bars: ~480,000 events for a bar
 * redrawn 240,000 times) it waits up to a switch interval each time, the pipe fills and the
 * child's write() blocks: the training ran 3.2x slower than into `| cat`. Here a C thread reads
 * the pipe, writes the bytes through (fd 2 through the line gate), appends them to the run log
 * and queues a copy for the pipeline in a ring bounded in bytes. A full ring never waits: its
 * oldest chunks are dropped and counted, handed on as one gap (bytes, newlines) so line numbers
 * stay right. Python takes what is queued with `take`, which waits with the lock released.
 * supervisor/readers.py drives it; without this extension its pure-Python loop does the same.
 */
#include "_outlets.h"
#include <signal.h>
#include <fcntl.h>

#define READ_SIZE (64 * 1024) /* stream/source.py READ_SIZE */

typedef struct node {
    struct node *next;
    size_t n;
    int tail; /* no data: `n` bytes of a line past the cap, which the splitter would not read */
    double t, wall;
    char data[];
} node;

typedef struct {
    PyObject_HEAD
    int fd, out_fd, wake_r, wake_w;
    Gate *gate;     /* or NULL */
    RunLogC *log;   /* or NULL */
    char *held;     /* this stream's part line for the run log */
    size_t nheld;
    size_t capacity, queued; /* 0: nobody parses this stream */
    size_t line_cap, segment; /* bytes since the last \n or \r; a segment past line_cap starts a tail */
    int in_tail;
    node *head, *tail;
    long long gap_bytes, gap_newlines, dropped;
    int gap_nl, eof, started, joined, out_err;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
} Pump;

static double clock_of(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long count_newlines(const char *d, size_t n) {
    long long k = 0;
    const char *end = d + n;
    while ((d = memchr(d, '\n', (size_t)(end - d))) != NULL) {
        k++;
        d++;
    }
    return k;
}

/* The run log by whole lines (readers.RunLog.write): a part line is held, up to `hold` bytes,
 * and written with its end (a newline, or a \r progress update). */
static void pump_log(Pump *p, const char *d, size_t n) {
    RunLogC *lg = p->log;
    const char *nl = memrchr(d, '\n', n), *cr = memrchr(d, '\r', n);
    const char *cut = nl > cr ? nl : cr;
    if (!cut && p->nheld + n < (size_t)lg->hold) {
        memcpy(p->held + p->nheld, d, n);
        p->nheld += n;
        return;
    }
    size_t upto = cut ? (size_t)(cut - d) + 1 : n;
    runlog_write(lg, p->held, p->nheld, d, upto);
    p->nheld = n - upto;
    memcpy(p->held, d + upto, p->nheld);
}

/* The oldest queued chunk becomes part of the gap at the ring's head (lock held). */
static void drop_head(Pump *p) {
    node *h = p->head;
    p->head = h->next;
    if (!p->head) p->tail = NULL;
    p->gap_bytes += (long long)h->n;
    p->dropped += (long long)h->n;
    if (h->tail) {
        p->gap_nl = 0;
    } else {
        p->queued -= h->n;
        p->gap_newlines += count_newlines(h->data, h->n);
        p->gap_nl = h->data[h->n - 1] == '\n';
    }
    free(h);
}

/* Whether `d` lies wholly in the tail of a line whose segment outgrew twice the cap (as
 * readers.PipeReader._line_tail): queued as its size alone, so a 200 MB line takes no memory. */
static int in_line_tail(Pump *p, const char *d, size_t n) {
    const char *nl = memrchr(d, '\n', n);
    if (!nl && p->in_tail) return 1;
    size_t from = nl ? (size_t)(nl - d) + 1 : 0;
    const char *cr = memrchr(d + from, '\r', n - from);
    if (!nl && !cr) p->segment += n;
    else p->segment = n - 1 - (size_t)((cr ? cr : nl) - d);
    p->in_tail = p->segment > 2 * p->line_cap;
    return 0;
}

static void queue_tail(Pump *p, size_t n) {
    pthread_mutex_lock(&p->mu);
    if (p->tail && p->tail->tail) {
        p->tail->n += n;
    } else {
        node *nd = calloc(1, sizeof(node));
        if (nd) {
            nd->n = n;
            nd->tail = 1;
            if (p->tail) p->tail->next = nd;
            else p->head = nd;
            p->tail = nd;
        } else {
            p->gap_bytes += (long long)n;
            p->dropped += (long long)n;
            p->gap_nl = 0;
        }
    }
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mu);
}

static void pump_queue(Pump *p, const char *d, size_t n, double t, double wall) {
    node *nd = malloc(sizeof(node) + n);
    pthread_mutex_lock(&p->mu);
    while (p->head && p->queued + n > p->capacity) drop_head(p);
    if (nd) {
        nd->next = NULL;
        nd->n = n;
        nd->tail = 0;
        nd->t = t;
        nd->wall = wall;
        memcpy(nd->data, d, n);
        if (p->tail) p->tail->next = nd;
        else p->head = nd;
        p->tail = nd;
        p->queued += n;
    } else { /* no memory for it: not parsed, counted */
        p->gap_bytes += (long long)n;
        p->gap_newlines += count_newlines(d, n);
        p->gap_nl = d[n - 1] == '\n';
        p->dropped += (long long)n;
    }
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mu);
}

static void pump_handle(Pump *p, const char *d, size_t n) {
    double t = clock_of(CLOCK_MONOTONIC), wall = clock_of(CLOCK_REALTIME);
    if (p->out_fd >= 0 && !p->out_err) {
        /* our own stdout gone (a closed pipe): keep draining the child, still parsing it */
        p->out_err = p->gate ? gate_pass(p->gate, p->out_fd, d, n) : write_all_fd(p->out_fd, d, n);
    }
    if (p->log) pump_log(p, d, n);
    if (!p->capacity) return;
    if (p->line_cap && in_line_tail(p, d, n)) queue_tail(p, n);
    else pump_queue(p, d, n, t, wall);
}

/* Reads until end of file, an error (EIO: a pty whose last writer closed), or the wake pipe:
 * then what is readable right now is drained, so a grandchild holding the pipe cannot hold us. */
static void pump_loop(Pump *p, char *buf) {
    struct pollfd fds[2] = {{p->fd, POLLIN, 0}, {p->wake_r, POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        int woken = fds[1].revents != 0;
        if (woken) {
            struct pollfd one = {p->fd, POLLIN, 0};
            if (poll(&one, 1, 0) <= 0) return;
        }
        ssize_t k = read(p->fd, buf, READ_SIZE);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        pump_handle(p, buf, (size_t)k);
    }
}

static void *pump_main(void *arg) {
    Pump *p = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the Python threads' to take */
    char *buf = malloc(READ_SIZE);
    if (buf) pump_loop(p, buf);
    free(buf);
    if (p->log && p->nheld) runlog_write(p->log, p->held, p->nheld, NULL, 0);
    p->nheld = 0;
    pthread_mutex_lock(&p->mu);
    p->eof = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int Pump_init(Pump *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"fd", "out_fd", "gate", "run_log", "capacity", "line_cap", NULL};
    PyObject *gate = Py_None, *lg = Py_None;
    Py_ssize_t capacity = 0, line_cap = 0;
    p->out_fd = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|$iOOnn", names, &p->fd, &p->out_fd, &gate, &lg, &capacity,
                                     &line_cap))
        return -1;
    p->line_cap = line_cap > 0 ? (size_t)line_cap : 0;
    if ((gate != Py_None && !PyObject_TypeCheck(gate, &GateType)) ||
        (lg != Py_None && !PyObject_TypeCheck(lg, &RunLogType))) {
        PyErr_SetString(PyExc_TypeError, "gate and run_log must be this module's LineGate and RunLog");
        return -1;
    }
    int wake[2];
    if (pipe2(wake, O_CLOEXEC) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    p->wake_r = wake[0];
    p->wake_w = wake[1];
    p->gate = gate == Py_None ? NULL : (Gate *)Py_NewRef(gate);
    p->log = lg == Py_None ? NULL : (RunLogC *)Py_NewRef(lg);
    if (p->log && !(p->held = malloc((size_t)p->log->hold + READ_SIZE))) {
        PyErr_NoMemory();
        return -1;
    }
    /* 0 parses nothing; else at least one read, so a chunk never outgrows the ring */
    p->capacity = capacity <= 0 ? 0 : (size_t)capacity < READ_SIZE ? READ_SIZE : (size_t)capacity;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);
    return 0;
}

static PyObject *Pump_start(Pump *p, PyObject *unused) {
    (void)unused;
    if (p->started) {
        PyErr_SetString(PyExc_RuntimeError, "a pump starts once");
        return NULL;
    }
    int err = pthread_create(&p->thread, NULL, pump_main, p);
    if (err) return PyErr_SetFromErrno((errno = err, PyExc_OSError));
    p->started = 1;
    Py_RETURN_NONE;
}

static void pump_wake(Pump *p) {
    if (write(p->wake_w, "x", 1) < 0) { /* full or closed: it is woken already */
    }
}

static void pump_join(Pump *p) {
    if (p->started && !p->joined) {
        Py_BEGIN_ALLOW_THREADS
        pthread_join(p->thread, NULL);
        Py_END_ALLOW_THREADS
        p->joined = 1;
    }
}

static PyObject *Pump_stop(Pump *p, PyObject *unused) {
    (void)unused;
    pump_wake(p);
    Py_RETURN_NONE;
}

static PyObject *Pump_join(Pump *p, PyObject *unused) {
    (void)unused;
    pump_join(p);
    Py_RETURN_NONE;
}

/* The taken items as Python: the gap first, as (bytes, newlines, ends_with_newline), then each
 * chunk as (data, monotonic time, wall time), a line's tail as (bytes,); the nodes are freed. */
static PyObject *taken_list(node *h, long long gb, long long gn, int gnl) {
    PyObject *out = PyList_New(0);
    if (out && gb) {
        PyObject *g = Py_BuildValue("(LLO)", gb, gn, gnl ? Py_True : Py_False);
        if (!g || PyList_Append(out, g) < 0) Py_CLEAR(out);
        Py_XDECREF(g);
    }
    while (h) {
        node *next = h->next;
        if (out) {
            PyObject *c = h->tail ? Py_BuildValue("(n)", (Py_ssize_t)h->n)
                                  : Py_BuildValue("(y#dd)", h->data, (Py_ssize_t)h->n, h->t, h->wall);
            if (!c || PyList_Append(out, c) < 0) Py_CLEAR(out);
            Py_XDECREF(c);
        }
        free(h);
        h = next;
    }
    return out;
}

static PyObject *Pump_take(Pump *p, PyObject *arg) {
    double timeout = PyFloat_AsDouble(arg);
    if (timeout == -1.0 && PyErr_Occurred()) return NULL;
    node *h;
    long long gb, gn;
    int gnl, eof;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double end = until.tv_sec + until.tv_nsec / 1e9 + (timeout > 0 ? timeout : 0);
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&p->mu);
    while (!p->head && !p->gap_bytes && !p->eof)
        if (pthread_cond_timedwait(&p->cond, &p->mu, &until) == ETIMEDOUT) break;
    h = p->head;
    gb = p->gap_bytes, gn = p->gap_newlines, gnl = p->gap_nl, eof = p->eof;
    p->head = p->tail = NULL;
    p->queued = 0;
    p->gap_bytes = p->gap_newlines = 0;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS
    if (!h && !gb && eof) Py_RETURN_NONE;
    return taken_list(h, gb, gn, gnl);
}

static void Pump_dealloc(Pump *p) {
    if (p->started && !p->joined) { /* never left running on freed memory */
        pump_wake(p);
        pump_join(p);
    }
    while (p->head) {
        node *next = p->head->next;
        free(p->head);
        p->head = next;
    }
    if (p->wake_r > 0) close(p->wake_r);
    if (p->wake_w > 0) close(p->wake_w);
    free(p->held);
    Py_XDECREF(p->gate);
    Py_XDECREF(p->log);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *Pump_errors(Pump *p, void *closure) {
    (void)closure;
    return Py_BuildValue("(ii)", p->out_err, p->log ? p->log->err : 0);
}

static PyMethodDef Pump_methods[] = {
    {"start", (PyCFunction)Pump_start, METH_NOARGS, "Start the pump's thread."},
    {"stop", (PyCFunction)Pump_stop, METH_NOARGS, "Drain what is readable now, then end (any thread)."},
    {"join", (PyCFunction)Pump_join, METH_NOARGS, "Wait for the pump's thread to end."},
    {"take", (PyCFunction)Pump_take, METH_O,
     "Wait up to `timeout` s for queued items: a list (empty: nothing came), None at the end."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Pump_getset[] = {
    {"errors", (getter)Pump_errors, NULL, "(pass-through errno, run log errno): 0 for none.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef Pump_members[] = {
    {"dropped", T_LONGLONG, offsetof(Pump, dropped), READONLY, "Bytes the full ring dropped (not parsed)."},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject PumpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainvisor._native._pump.Pump",
    .tp_basicsize = sizeof(Pump), .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pump_init, .tp_dealloc = (destructor)Pump_dealloc, .tp_methods = Pump_methods,
    .tp_getset = Pump_getset, .tp_members = Pump_members,
    .tp_doc = "Pump(fd, *, out_fd, gate, run_log, capacity, line_cap): one pipe read and passed through in C."};

static struct PyModuleDef pump_module = {PyModuleDef_HEAD_INIT, "_pump",
                                         "The child's pipes passed through without the interpreter lock.", -1,
                                         NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pump(void) {
    PyTypeObject *types[] = {&GateType, &RunLogType, &PumpType};
    const char *names[] = {"LineGate", "RunLog", "Pump"};
    PyObject *m = PyModule_Create(&pump_module);
    if (!m) return NULL;
    for (int i = 0; i < 3; i++)
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    if (PyModule_AddIntConstant(m, "READ_SIZE", READ_SIZE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
