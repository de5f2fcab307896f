"""Run ``hami`` with a CPU-time profiler switched by signals: ``python -m bench.cpuprofile OUT hami-args…``.

``SIGUSR1`` starts a ``cProfile`` profiler whose clock is the process's CPU time (``time.process_time``: user and
system time, so a function's figure is the CPU it cost, not the time it waited), ``SIGUSR2`` stops it and writes
the statistics to ``OUT`` (``pstats`` format; ``python -m pstats OUT``). The end-to-end benchmark sends them around
a burst when ``HAMI_BENCH_CPROFILE`` is set, so only the burst is profiled. The profiler's own cost inflates every
figure about alike (several calls per function call); compare shares, and take the absolute CPU per pod from the
run without it.
"""

from __future__ import annotations

import cProfile
import signal
import sys
import time
from types import FrameType


def main(argv: list[str]) -> None:
    out = argv[0]
    profiler = cProfile.Profile(time.process_time)

    def start(_signum: int, _frame: FrameType | None) -> None:
        profiler.enable()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from hami.cli import main as hami_main

    sys.argv = ["hami", *argv[1:]]
    hami_main()


if __name__ == "__main__":
    main(sys.argv[1:])
