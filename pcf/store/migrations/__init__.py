"""Alembic migrations of the schema: ``env.py`` and one revision per change in ``versions/``.

They run through :mod:`pcf.store.schema` (``pcf db upgrade``), never through an ``alembic.ini``.
"""
