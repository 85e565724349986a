"""Pollux (OSDI'21): ``policy`` (the ``pollux`` policy), ``problem`` (its allocation problem),
``optimiser`` (our solver of it), ``genetic`` (a genetic algorithm like the study's) and ``learned``
(``knowledge: learned``: the goodput each job's own estimate gives)."""
