/* The sink host's count of a stretch of metrics.jsonl it passes over unread (sinks/host/
 * follower.py `count_records`, whose Python loop is the reference tests compare it with): the
 * newlines and the notice lines in [start, stop) of an open file, read with pread in 4 MiB
 * blocks, each cut at its last newline so a notice never spans two blocks. The interpreter lock
 * is released for the whole count: at the end of a run the host counts a flood's hundreds of MB
 * while its sinks write what they hold, and in Python the count held the lock the sinks need. */
#include "_format.h"
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define COUNT_BLOCK (4 << 20)

/* count_lines(fd, start, stop, pattern) -> (newlines, patterns) */
PyObject *count_lines(PyObject *self, PyObject *args) {
    int fd;
    long long start, stop;
    const char *pattern;
    Py_ssize_t plen;
    if (!PyArg_ParseTuple(args, "iLLy#", &fd, &start, &stop, &pattern, &plen)) return NULL;
    if (plen <= 0) {
        PyErr_SetString(PyExc_ValueError, "count_lines: an empty pattern");
        return NULL;
    }
    char *buf = PyMem_RawMalloc(COUNT_BLOCK);
    if (!buf) return PyErr_NoMemory();
    long long lines = 0, found = 0, pos = start;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < stop) {
        size_t want = (size_t)(stop - pos < COUNT_BLOCK ? stop - pos : COUNT_BLOCK);
        ssize_t got = pread(fd, buf, want, (off_t)pos);
        if (got < 0) {
            if (errno == EINTR) continue;
            err = errno;
            break;
        }
        if (got == 0) break;
        size_t cut = (size_t)got;  /* whole lines: up to the last newline, when there is one */
        while (cut > 0 && buf[cut - 1] != '\n') cut--;
        if (cut == 0) cut = (size_t)got;
        for (const char *p = buf, *end = buf + cut; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++) lines++;
        for (const char *p = buf, *end = buf + cut; (size_t)(end - p) >= (size_t)plen; p += plen) {
            p = memmem(p, (size_t)(end - p), pattern, (size_t)plen);
            if (!p) break;
            found++;
        }
        pos += (long long)cut;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(buf);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("LL", lines, found);
}
