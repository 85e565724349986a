"""Gimbal (2025): ``policy`` (``gimbal-jct``, ``gimbal-deadline``, ``gimbal-makespan`` over a base
scheduler), ``job_sets`` (the job packing sets and their star rule, §5.1) and ``search`` (the
coordinator's Algorithm 1 on engine timers, §5.2)."""
