"""Research studies: one-off analyses whose findings are recorded in ``docs/studies/``.

Each module is run as ``python -m schedlab.studies.NAME [--help]`` and prints what its page reports;
``conformance`` (a package) compares the baselines with their authors' simulators and is imported by
the tests. Nothing in ``sched/`` or the flows imports a study.
"""
