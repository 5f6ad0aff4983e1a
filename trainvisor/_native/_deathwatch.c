/* The death watcher: one signal to the training when trainvisor dies, however it dies.
 *
 * Why not PR_SET_PDEATHSIG alone: the kernel sends it at every re-parenting, and a SIGKILLed
 * multi-threaded trainvisor hands its children from each dying thread to the next: the training
 * got its SIGTERM three or four times within milliseconds, and many trainings take a second
 * SIGTERM as "abort now", cutting the very checkpoint save the first one asked for.
 *
 * Here a forked process (never an interpreter) holds the read end of a pipe whose only write end
 * trainvisor holds (O_CLOEXEC: the training never inherits it). The child, between its fork and
 * its exec, writes its own pid into the pipe (`announce`), so even a trainvisor killed right after
 * the fork is covered: the pipe reaches EOF only once the child has exec'd. The watcher opens a
 * pidfd on that pid and polls both: EOF (trainvisor died: the kernel closed its end) -> the death
 * signal ONCE to the child's process group, as trainvisor's own forwarding does (the child leads
 * its own session and group); the pidfd readable (the child ended first) -> nothing. Either way
 * it exits, with the number of the signal it sent (0: none). After fork only async-signal-safe
 * calls (and string functions on its own buffer): sigaction, sigprocmask, setsid, dup2, open,
 * close, read, poll, kill, syscall, _exit.
 * supervisor/deathwatch.py drives it; without this extension (or without pidfd_open, Linux < 5.3)
 * the child keeps PR_SET_PDEATHSIG.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WATCHER_NAME "tv-deathwatch"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static int pidfd_open_(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

/* Every fd but the pipe's read end, which becomes fd 0: the watcher must not keep trainvisor's
 * stdout (a reader would wait for its EOF), the child's pipes or the write end open. */
static void keep_only(int read_fd) {
    if (read_fd != 0 && dup2(read_fd, 0) < 0) _exit(0);
    if (syscall(SYS_close_range, 1, ~0U, 0) == 0) return;
    struct rlimit rl;
    long top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 65536;
    for (long fd = 1; fd < top; fd++) close((int)fd);
}

/* A number in `base` (10 or 16) at `p`, with where it ends in `*end`: strtoul reads the locale,
 * which may live in memory the watcher has unmapped (drop_memory). */
static unsigned long number(const char *p, int base, const char **end) {
    unsigned long v = 0;
    for (;; p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : base == 16 && *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (d < 0) break;
        v = v * (unsigned long)base + (unsigned long)d;
    }
    if (end) *end = p;
    return v;
}

/* The watcher's command line becomes its name: a forked copy of trainvisor, it would otherwise
 * show trainvisor's whole command, and a `pkill -f` or a look for the training's command line
 * would take it for either. Its argv area (arg_start, arg_end: fields 48 and 49 of
 * /proc/self/stat) is its own copy of that memory since the fork, so it is overwritten in place. */
static void set_title(void) {
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long start = 0, end = 0;
    for (int field = 2; p != NULL && *p && field < 49; p++) {
        if (*p != ' ') continue;
        field++;
        if (field == 48) start = number(p + 1, 10, NULL);
        if (field == 49) end = number(p + 1, 10, NULL);
    }
    if (start == 0 || end <= start) return;
    size_t room = end - start;
    if (room <= sizeof WATCHER_NAME) return;
    memset((char *)start, 0, room);
    memcpy((char *)start, WATCHER_NAME, sizeof WATCHER_NAME);
    /* A last byte that is not NUL makes the kernel read the area as a retitled process does
     * (setproctitle): up to the first NUL, so no empty arguments trail the name. */
    ((char *)end)[-1] = ' ';
}

/* What drop_memory keeps besides file mappings and the kernel's: the mappings holding the stack
 * (this frame) and the thread's block (thread pointer, errno), and the .bss of the code the
 * watcher still runs (the anonymous mapping right after the file mapping of libc, the dynamic
 * loader or this module; any other library's, Python's among them, is not needed). */
typedef struct {
    uintptr_t keep[3];
    uintptr_t prev_end;
    int prev_needed;
} Keep;

static int needed_library(const char *path) {
    return strstr(path, "/libc.so") || strstr(path, "/libc-") || strstr(path, "/ld-linux") ||
           strstr(path, "_deathwatch");
}

/* One line of /proc/self/maps ("start-end perms offset dev inode [path]"): unmapped when it is
 * anonymous memory the watcher never touches. */
static void drop_mapping(const char *line, Keep *k) {
    const char *p = line;
    uintptr_t start = number(p, 16, &p), end = number(p + 1, 16, &p);
    int writable = p[0] && p[1] && p[2] == 'w';
    for (int spaces = 0; *p && spaces < 4; p++) spaces += *p == ' ';
    unsigned long inode = number(p, 10, &p);
    while (*p == ' ') p++;
    int file = inode != 0, heap = p[0] == '[' && p[1] == 'h', needed = file && needed_library(p);
    int anonymous = !file && (*p == 0 || heap);
    int after_library = k->prev_needed && k->prev_end == start;
    k->prev_needed = needed;
    k->prev_end = end;
    /* Another library's written data (Python's 1.2 MB) is trainvisor's copy too; read-only file
     * mappings cost nothing (the page cache's). */
    int dropped = anonymous ? !after_library : file && writable && !needed;
    if (!dropped || end <= start) return;
    for (int i = 0; i < 3; i++) {
        if (k->keep[i] >= start && k->keep[i] < end) return;
    }
    munmap((void *)start, end - start);
}

/* A forked copy shares every page trainvisor had at the fork, and keeps the old copy of each one
 * trainvisor writes to afterwards: 14 MB of a 31 MB trainvisor within a second of a run. The
 * watcher needs none of that anonymous memory (Python's heap, arenas, other threads' stacks),
 * so it is unmapped; nothing here calls malloc or reads the locale afterwards. */
static void drop_memory(void) {
    Keep k = {{(uintptr_t)__builtin_frame_address(0), (uintptr_t)&errno, 0}, 0, 0};
#if defined(__has_builtin)
#if __has_builtin(__builtin_thread_pointer)
    k.keep[2] = (uintptr_t)__builtin_thread_pointer();
#endif
#endif
    char buf[4096];
    size_t have = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n <= 0) break;
        have += (size_t)n;
        buf[have] = 0;
        char *line = buf, *nl;
        while ((nl = memchr(line, '\n', (size_t)(buf + have - line))) != NULL) {
            *nl = 0;
            drop_mapping(line, &k);
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have == sizeof buf - 1) break; /* a line longer than the buffer: keep the rest */
    }
    close(fd);
}

/* Default dispositions (Python's handlers are trainvisor's, and so is its wakeup fd), nothing
 * blocked, a session of its own: `kill -9 -PGID` of trainvisor's group must not take the watcher,
 * or the training would get no signal at all from that kill. */
static void become_watcher(int read_fd) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) {
        if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    keep_only(read_fd);
    prctl(PR_SET_NAME, WATCHER_NAME, 0, 0, 0); /* what ps and top show */
    set_title();
    drop_memory();
}

/* The child's pid, as `announce` (or trainvisor, re-arming) wrote it; 0 at EOF without one:
 * trainvisor ended before a child was started. */
static pid_t read_pid(void) {
    int32_t pid = 0;
    size_t got = 0;
    while (got < sizeof pid) {
        ssize_t k = read(0, (char *)&pid + got, sizeof pid - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        got += (size_t)k;
    }
    return (pid_t)pid;
}

/* Polls the pipe and the child's pidfd; returns once trainvisor's end is closed (1) or the child
 * has ended (0). */
static int trainvisor_died(int pidfd) {
    struct pollfd fds[2] = {{0, POLLIN, 0}, {pidfd, POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return 0; /* cannot watch: better no signal than one trainvisor did not mean */
        }
        if (fds[1].revents) return 0;
        if (fds[0].revents) {
            char b;
            ssize_t k = read(0, &b, 1);
            if (k > 0 || (k < 0 && errno == EINTR)) continue; /* a stray byte: keep watching */
            return 1;
        }
    }
}

static void watch(int read_fd, int sig) {
    become_watcher(read_fd);
    pid_t pid = read_pid();
    if (pid <= 0) _exit(0);
    /* pids are handed out cyclically: the one read names the child unless the child ended, was
     * reaped and pid_max processes were started since, all in the moment before this call. */
    int pidfd = pidfd_open_(pid);
    if (pidfd < 0) _exit(0); /* the child is gone already */
    if (!trainvisor_died(pidfd)) _exit(0);
    /* The child still runs (its pidfd is not readable): while it does, no other group can take
     * its pid, so the group signalled is the training's. */
    struct pollfd ended = {pidfd, POLLIN, 0};
    if (poll(&ended, 1, 0) != 0) _exit(0);
    _exit(kill(-pid, sig) == 0 ? sig : 0);
}

/* start(read_fd, signal) -> the watcher's pid. All signals are blocked around the fork so none
 * runs trainvisor's (Python's) handler in the watcher before its dispositions are reset. No
 * Python fork hooks run: the watcher never runs Python. */
static PyObject *dw_start(PyObject *self, PyObject *args) {
    int read_fd, sig;
    if (!PyArg_ParseTuple(args, "ii:start", &read_fd, &sig)) return NULL;
    if (sig <= 0 || sig >= NSIG || read_fd < 0) {
        PyErr_SetString(PyExc_ValueError, "start: a file descriptor and a signal number");
        return NULL;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) watch(read_fd, sig); /* never returns */
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong((long)pid);
}

/* announce(fd): the calling process's pid into the watcher's pipe, from the child between fork
 * and exec. SIGPIPE is ignored for the write (a watcher killed meanwhile must not kill the child
 * before its exec: trainvisor starts another one), then put back as it was. */
static PyObject *dw_announce(PyObject *self, PyObject *arg) {
    int fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    struct sigaction ign, old;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old);
    int32_t pid = (int32_t)getpid();
    ssize_t k;
    do {
        k = write(fd, &pid, sizeof pid);
    } while (k < 0 && errno == EINTR);
    sigaction(SIGPIPE, &old, NULL);
    return PyBool_FromLong(k == (ssize_t)sizeof pid);
}

/* supported() -> whether this kernel has pidfd_open (Linux >= 5.3), which the watcher needs to
 * tell the child's end from a reused pid. */
static PyObject *dw_supported(PyObject *self, PyObject *unused) {
    int fd = pidfd_open_(getpid());
    if (fd < 0) Py_RETURN_FALSE;
    close(fd);
    Py_RETURN_TRUE;
}

static PyMethodDef dw_methods[] = {
    {"start", dw_start, METH_VARARGS, "start(read_fd, signal) -> the watcher's pid."},
    {"announce", dw_announce, METH_O, "announce(fd): this process's pid into the watcher's pipe."},
    {"supported", dw_supported, METH_NOARGS, "Whether the kernel has pidfd_open."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef dw_module = {PyModuleDef_HEAD_INIT, "_deathwatch",
                                       "The death watcher: one signal to the child when trainvisor dies.", -1,
                                       dw_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__deathwatch(void) { return PyModule_Create(&dw_module); }
