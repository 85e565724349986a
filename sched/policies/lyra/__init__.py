"""Lyra (EuroSys'23): ``policy`` (``lyra`` and ``opportunistic``), ``heterogeneous`` (jobs on training
and on-loan GPUs at once), ``knapsack`` (the elastic scaling's multiple-choice knapsack) and ``bfd``
(best-fit-decreasing worker placement). Which loaned servers go back is the orchestrator's
(``sched/core/reclaim.py``)."""
