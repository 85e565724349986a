"""The sharing-aware shortest-job-first family: ``policy`` (``sjf-ffs``, ``sjf-bsbf``, ``castor``:
Castor §5, SJF-BSBF §V)."""
