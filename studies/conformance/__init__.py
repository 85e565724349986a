"""Conformance: schedlab's baselines against their authors' own simulators, job for job.

Each peer has a comparison module, which replays schedlab on the peer's inputs and compares with the
peer's recorded per-job output (``tests/fixtures/conformance/``), and a recorder, which runs the peer's
code (a checkout outside this repository; not run in CI) and writes those fixtures:

- ``tiresias`` / ``tiresias_record``: the Tiresias simulator (``tiresias``, ``srtf``, ``fifo``);
- ``gavel`` / ``gavel_record``: Gavel's simulator (``gavel``);
- ``lucid`` / ``lucid_record``: Lucid's simulator (``lucid``, ``fifo``, ``sjf``);
- ``helios`` / ``helios_record``: the Helios simulator (``fifo``, ``sjf``, ``srtf``, ``qssf``).

``common`` holds what the first three share (the Philly CSV, the fixtures, :func:`~.common.compare`).
The tests (``tests/test_conformance*.py``) import these modules; ``python -m
schedlab.studies.conformance.NAME`` prints the comparison. The findings are in ``docs/studies/``.
"""
