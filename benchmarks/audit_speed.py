"""CPU time of one whole empirical audit: ``audit_release(fed-cdp, point=2, trials=N)`` on
LeNet's shapes (13,426 values), every canary, worst-case world and statistic.

Prints one line: CPU seconds (this process and its children, ``resource.getrusage``), wall
seconds, torch threads, the load average before and after (``/proc/loadavg``), the number of
games played and the winners. ``--profile-out FILE`` also writes a cProfile of the call (one
torch thread) and prints its top entries by cumulative time.

Usage::

    python -m benchmarks.audit_speed --trials 20000
    python -m benchmarks.audit_speed --trials 2000 --threads 1 --profile-out /tmp/audit.prof
    python -m benchmarks.audit_speed --tiny          # 200 runs per side (seconds)
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Sequence
from pathlib import Path


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def loadavg() -> str:
    """The first three fields of /proc/loadavg, or '-' where there is none."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "-"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20_000, help="held-out runs per side")
    ap.add_argument("--tiny", action="store_true", help="200 runs per side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--profile-out", default=None, help="write a cProfile of the call here")
    args = ap.parse_args(argv)
    import torch

    import leakaudit.defenses as D
    from leakaudit.empirical import audit_release

    if args.threads:
        torch.set_num_threads(args.threads)
    trials = 200 if args.tiny else args.trials
    defense = D.get("fed-cdp")
    before = loadavg()
    wall, cpu = time.perf_counter(), cpu_seconds()
    if args.profile_out:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        report = prof.runcall(audit_release, defense, point=2, trials=trials, seed=args.seed)
        prof.dump_stats(args.profile_out)
    else:
        report = audit_release(defense, point=2, trials=trials, seed=args.seed)
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    row = report.rows()[0]
    print(f"audit_release(fed-cdp, point=2, trials={trials}): cpu {cpu:.1f} s, wall "
          f"{wall:.1f} s, torch threads {torch.get_num_threads()}, load before {before}, "
          f"after {loadavg()}, games {len(row['selection'])}, eps {row['canary']}/"
          f"{row['statistic']} {row['eps_lower']:.3f}, mu {row['mu_canary']}/"
          f"{row['mu_statistic']} {row['mu_lower']:.3f}")
    if args.profile_out:
        pstats.Stats(args.profile_out).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
