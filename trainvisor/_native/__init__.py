"""C code of more than one area: the exact number routines (fastnum.h, included by the parsers'
and the sinks' extensions) and the pipe pump (_pump.c: the child's bytes passed through without
the interpreter lock; supervisor/readers.py and stderr_gate.py use it when it is built), the
death watcher (_deathwatch.c: the process that sends the child one signal when trainvisor dies;
supervisor/deathwatch.py), S3's CRC64NVME, for uploads and downloads (_crc64.c;
uploaders/crc64nvme.py), and the supervisor's prctl and sigaction calls without ctypes (_proc.c;
supervisor/process.py, signals.py)."""
