/* What the supervisor asks of the kernel about processes, without ctypes.
 *
 * Why C: the only other way from Python is ctypes, whose import and libc lookup cost a plain
 * `trainvisor run` some 4 ms of its start (bench/startup.py) for three prctl calls and a
 * sigaction. supervisor/process.py makes trainvisor a child subreaper (orphans of the child's
 * tree re-parent to it, so a double-forked grandchild is still found and ended) and undoes it;
 * supervisor/signals.py's child setup, between fork and exec, sets the parent-death signal and
 * a default disposition where Python cannot (not its main thread). Without this extension they
 * use ctypes as before. Everything here is async-signal-safe: prctl and sigaction only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>

#ifndef PR_SET_CHILD_SUBREAPER
#define PR_SET_CHILD_SUBREAPER 36
#define PR_GET_CHILD_SUBREAPER 37
#endif

static PyObject *proc_child_subreaper(PyObject *self, PyObject *unused) {
    int was = 0;
    if (prctl(PR_GET_CHILD_SUBREAPER, (unsigned long)&was, 0, 0, 0) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyBool_FromLong(was);
}

static PyObject *proc_set_child_subreaper(PyObject *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    if (prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)on, 0, 0, 0) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *proc_set_parent_death_signal(PyObject *self, PyObject *arg) {
    long sig = PyLong_AsLong(arg);
    if (sig == -1 && PyErr_Occurred()) return NULL;
    if (prctl(PR_SET_PDEATHSIG, (unsigned long)sig, 0, 0, 0) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* SIG_DFL for `sig` from any thread of a forked child, where Python's signal.signal refuses. */
static PyObject *proc_default_signal(PyObject *self, PyObject *arg) {
    long sig = PyLong_AsLong(arg);
    if (sig == -1 && PyErr_Occurred()) return NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    if (sigaction((int)sig, &sa, NULL) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyMethodDef proc_methods[] = {
    {"child_subreaper", proc_child_subreaper, METH_NOARGS, "child_subreaper() -> whether this process is one."},
    {"set_child_subreaper", proc_set_child_subreaper, METH_O, "set_child_subreaper(on): PR_SET_CHILD_SUBREAPER."},
    {"set_parent_death_signal", proc_set_parent_death_signal, METH_O,
     "set_parent_death_signal(sig): PR_SET_PDEATHSIG (0: none)."},
    {"default_signal", proc_default_signal, METH_O, "default_signal(sig): SIG_DFL for sig, from any thread."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef proc_module = {PyModuleDef_HEAD_INIT, "_proc",
                                         "prctl and sigaction for the supervisor, without ctypes.", -1, proc_methods};

PyMODINIT_FUNC PyInit__proc(void) { return PyModule_Create(&proc_module); }
