"""How long does a reclaim decision take at the paper's scale?  (target: <= 3 ms; Lyra §7: 1-3 ms)

Builds Lyra's simulated cluster (443 training + 520 inference 8-GPU servers), lends ``--loaned``
inference servers (default 190: ServeGen's mean loanable share, docs/explanation/lyra.md), fills the cluster
with a seeded mix of jobs (1-32 GPUs; a share of them elastic at 2x their base, their flexible workers
on on-loan servers), then times, per strategy and reclaim size N_R, the whole decision the orchestrator
makes: building the view from the cluster and choosing the servers (median and max wall time over
repetitions, and the median CPU time, which a loaded machine disturbs less).

    python -m schedlab.benchmarks.lyra_reclaim [--loaned 190] [--reps 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from schedlab.sched.core.cluster import ClusterSpec, PoolSpec
from schedlab.sched.core.job import Job
from schedlab.sched.core.pools import LoanOptions, PooledCluster, place_on
from schedlab.sched.core.reclaim import STRATEGIES, ReclaimView, plan_for


def build(loaned: int, seed: int) -> tuple[PooledCluster, list[Job]]:
    spec = ClusterSpec(name="lyra-prod", pools=[
        PoolSpec(name="training", servers=443, gpus_per_server=8),
        PoolSpec(name="inference", servers=520, gpus_per_server=8, gpu_type="t4", gpu_memory_gb=16)])
    cluster = PooledCluster(spec, LoanOptions(load="constant:0"))
    cluster.lend(cluster.idle_inference()[:loaned])
    rng = random.Random(seed)
    jobs: list[Job] = []
    on_loan = list(cluster.on_loan)
    training = range(cluster.training_servers)
    misses = 0
    while misses < 200:
        d = rng.choice([1, 1, 1, 1, 2, 2, 4, 4, 8, 16])
        job = Job(f"j{len(jobs)}", 0.0, d, 3600.0, index=len(jobs))
        elastic = d >= 2 and rng.random() < 0.2
        if elastic:  # base on training, flexible workers on loan (Lyra §5.3's separate groups)
            base = place_on(cluster, training, d)
            flex = place_on(cluster, on_loan, d)
            if base is None or flex is None:
                misses += 1
                continue
            job.gpus = cluster.take_from_servers(base, job) + cluster.take_from_servers(flex, job)
            job.num_gpus, job.elastic_min, job.elastic_max = 2 * d, d, 2 * d
        else:
            pool = on_loan if rng.random() < 0.4 else training
            placement = place_on(cluster, pool, cluster.loan_gpus(d) if pool is on_loan else d)
            if placement is None:
                placement = place_on(cluster, training, d)
                if placement is None:
                    misses += 1
                    continue
            job.gpus = cluster.take_from_servers(placement, job)
        jobs.append(job)
    return cluster, jobs


def view_of(cluster: PooledCluster) -> ReclaimView:
    server_jobs = {s: cluster.jobs_on_server(s) for s in cluster.on_loan}
    jobs = {j for held in server_jobs.values() for j in held}
    return ReclaimView(tuple(cluster.on_loan), server_jobs, {j: cluster.servers_of(j) for j in jobs},
                       {j: max(0, j.num_gpus - j.elastic_min) if j.elastic_min else 0 for j in jobs},
                       cluster.gpus_per_server, {j: 3600.0 for j in jobs})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loaned", type=int, default=190)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cluster, jobs = build(args.loaned, args.seed)
    busy = sum(cluster.busy_gpus(s) for s in cluster.on_loan)
    print(f"cluster: 443 + 520 servers, {len(cluster.on_loan)} on loan ({busy} busy on-loan GPUs),"
          f" {len(jobs)} jobs ({sum(1 for j in jobs if j.elastic_min)} elastic)")
    print(f"{'strategy':<10} {'N_R':>4} {'median ms':>10} {'max ms':>8} {'CPU median ms':>14} {'preempted':>9}"
          f" {'collateral':>10}")
    for name in ("lyra", "scf", "random"):
        for n in (1, 5, 20, 60):
            times, cpu, plan = [], [], None
            for rep in range(args.reps):
                started, cpu_started = time.perf_counter(), time.process_time()
                view = view_of(cluster)
                servers = STRATEGIES[name](view, n, random.Random(rep))
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - cpu_started)
                plan = plan_for(view, servers)
            print(f"{name:<10} {n:>4} {statistics.median(times) * 1e3:>10.2f} {max(times) * 1e3:>8.2f}"
                  f" {statistics.median(cpu) * 1e3:>14.2f} {len(plan.preempt):>9} {plan.collateral_gpus / (8 * n):>10.3f}")


if __name__ == "__main__":
    main()
