"""A torchrun rank leaves through `leave_rank` once its output is written (mla_debug/_rank_exit.py): every
rank's output arrives, the status chosen is the one torchrun sees, and nothing after it runs."""

from __future__ import annotations

import pytest
from torchrun_launch import torchrun

from mla_debug._rank_exit import leave_rank

RANK_SCRIPT = """
import sys
import torch.distributed as dist
from mla_debug._rank_exit import leave_rank

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} wrote its output", end="")  # no newline, no flush: leave_rank flushes it
leave_rank(int(sys.argv[1]))
print("after leave_rank")
"""


@pytest.mark.parametrize("status", [0, 3])
def test_every_rank_leaves_with_its_output_flushed_and_the_status_it_chose(tmp_path, status):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    done = torchrun(script, 2, str(status), timeout=180)
    assert ("rank 0 wrote its output" in done.stdout) and ("rank 1 wrote its output" in done.stdout), done.stderr[-3000:]
    assert "after leave_rank" not in done.stdout
    assert (done.returncode == 0) == (status == 0), done.stderr[-3000:]
    if status:
        assert f"exitcode  : {status}" in done.stderr


def test_without_a_process_group_it_returns():
    assert leave_rank(5) is None  # a single process (or the CLI called in-process) goes on to return normally
