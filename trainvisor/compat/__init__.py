"""Drop-in homes for the APIs trainvisor's users knew before it: `compat.ava`, the AVA SDK's
calls (`from ava import cmd` -> `from trainvisor.compat.ava import cmd`), built on trainvisor's
own parts. Nothing here is imported by trainvisor itself."""
