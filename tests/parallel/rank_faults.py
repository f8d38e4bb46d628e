"""Faults planted in the rank processes of the distributed executor through its public observer hook
(`StepObserver.around_rank`, entered in each rank before it builds its layer): a rank that raises, and a
rank that dies without reporting. Module-level classes, so they pickle into the spawned ranks."""

from __future__ import annotations

import os

from mla_debug.parallel import StepObserver


class FailOnRank(StepObserver):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def around_rank(self, rank, device):
        if rank == self.rank:
            raise RuntimeError(f"injected failure on rank {rank}")
        return super().around_rank(rank, device)


class CrashOnRank(StepObserver):
    """Exits with code 70 after printing from Python and writing to descriptor 2, as native code does."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def around_rank(self, rank, device):
        if rank == self.rank:
            print(f"rank {rank} is about to crash", flush=True)
            os.write(2, f"native message from rank {rank}\n".encode())
            os._exit(70)
        return super().around_rank(rank, device)
