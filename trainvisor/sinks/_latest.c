/* The Prometheus sink's per-record loop in C: exactly PrometheusSink._write_python
 * (sinks/prometheus.py), which tests/test_sink_prometheus.py compares it with.
 *
 * For each metric (a Metric named tuple, found by exact type) the value goes under
 * the raw key (name, phase, test_net, rank), and its iteration and epoch, when not
 * None, under its rank; a checkpoint announcement (any other event that is an
 * instance of the checkpoint type) counts, and moves the rank-less (None) iteration
 * and epoch. Labels' text is made at scrape time, in Python. The field positions
 * come from the caller (Metric._fields), so the tuple's layout is said once. */
#include "_format.h"

enum { F_NAME, F_PHASE, F_NET, F_RANK, F_VALUE, F_ITER, F_EPOCH, N_FIELDS };

static int set_if(PyObject *into, PyObject *key, PyObject *v) {
    return v == Py_None ? 0 : PyDict_SetItem(into, key, v);
}

/* latest_update(events, metric_type, checkpoint_type, positions, latest, iteration, epoch)
 * -> (metrics, checkpoints) */
PyObject *latest_update(PyObject *self, PyObject *args) {
    PyObject *events, *metric_type, *checkpoint_type, *positions, *latest, *iteration, *epoch;
    if (!PyArg_ParseTuple(args, "OOOO!O!O!O!", &events, &metric_type, &checkpoint_type, &PyTuple_Type,
                          &positions, &PyDict_Type, &latest, &PyDict_Type, &iteration, &PyDict_Type, &epoch))
        return NULL;
    if (PyTuple_GET_SIZE(positions) != N_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "latest_update: positions must name 7 fields");
        return NULL;
    }
    Py_ssize_t at[N_FIELDS], last = 0;  /* last: the highest position read from a record */
    for (int i = 0; i < N_FIELDS; i++) {
        if ((at[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, i))) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "latest_update: a negative position");
            return NULL;
        }
        if (at[i] > last) last = at[i];
    }
    PyObject *seq = PySequence_Fast(events, "latest_update: events must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), metrics = 0, checkpoints = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ev = items[i];
        if (Py_TYPE(ev) == (PyTypeObject *)metric_type && PyTuple_GET_SIZE(ev) > last) {
            PyObject *rank = PyTuple_GET_ITEM(ev, at[F_RANK]);
            PyObject *key = PyTuple_Pack(4, PyTuple_GET_ITEM(ev, at[F_NAME]), PyTuple_GET_ITEM(ev, at[F_PHASE]),
                                         PyTuple_GET_ITEM(ev, at[F_NET]), rank);
            if (!key) goto fail;
            int rc = PyDict_SetItem(latest, key, PyTuple_GET_ITEM(ev, at[F_VALUE]));
            Py_DECREF(key);
            if (rc || set_if(iteration, rank, PyTuple_GET_ITEM(ev, at[F_ITER]))
                   || set_if(epoch, rank, PyTuple_GET_ITEM(ev, at[F_EPOCH])))
                goto fail;
            metrics++;
            continue;
        }
        int is_checkpoint = PyObject_IsInstance(ev, checkpoint_type);
        if (is_checkpoint < 0) goto fail;
        if (!is_checkpoint) continue;
        checkpoints++;
        for (int f = 0; f < 2; f++) {
            PyObject *v = PyObject_GetAttrString(ev, f ? "epoch" : "iteration");
            if (!v) goto fail;
            int rc = set_if(f ? epoch : iteration, Py_None, v);
            Py_DECREF(v);
            if (rc) goto fail;
        }
    }
    Py_DECREF(seq);
    return Py_BuildValue("nn", metrics, checkpoints);
fail:
    Py_DECREF(seq);
    return NULL;
}
