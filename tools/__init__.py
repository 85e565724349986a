"""Generators of data shipped in ``conf/`` (each module names the file it writes) and helpers for
looking at the product (screenshots). Run one as ``python -m schedlab.tools.NAME [--help]``.
"""
