"""The registry's vocabulary, imported by every other room: problems and their log, the
one place foreign code's failures are caught (:mod:`.guard`), the ``FLYCONFIGS_*``
settings, the environment snapshot and its one scan of entry points, names, key axes,
the product catalog and the collector pause of bulk work.  It imports nothing else of
the registry."""
