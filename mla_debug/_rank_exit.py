"""Ending a torchrun rank once its output is written, without the interpreter's shutdown.

Left to interpreter exit, gloo can abort a rank with SIGABRT ("terminate called without an active
exception") after everything it had to do is done: work objects that gloo's threads still hold are
destroyed while the interpreter is being finalized (the hazard pytorch/pytorch PR #179291 describes).
torchrun then reports the whole run as failed. Destroying the process group first made this rarer
but did not stop it: a TP4 scan still aborted that way after destroy_process_group. So each rank waits
until every rank is done (a barrier), flushes its output and leaves with os._exit. Nothing is torn down
that could abort, and torchrun sees the exit status the command chose.
"""

from __future__ import annotations

import logging
import os
import sys


def leave_rank(status: int = 0) -> None:
    """Under an initialized torch.distributed process group: wait for every rank, flush and exit the
    process with `status` now. Without one (a single process, a test calling the CLI in-process), return."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()  # no rank leaves while another may still talk to it
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
