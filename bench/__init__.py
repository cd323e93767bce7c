"""flyconfigs' benchmarks, each a module run from the checkout's root:

    python -m bench.NAME [options]

so that ``bench.common`` (the shared helpers) and, for the loader benchmarks, the tests'
fixtures (``tests.factories``, ``tests.distributions``) import by their package names; no
benchmark touches ``sys.path``, and each imports only flyconfigs' public names.  A
benchmark writes a result only when given ``--out``; ``bench/results/`` keeps the result
of record per benchmark and device, the ones ``docs/benchmarks.md`` cites (earlier runs
are in the git history).

Kernels against their peers, on a GPU: ``rmsnorm`` (and ``plot_rmsnorm`` for its chart
and table), ``fused_add_rmsnorm``.  Host costs: ``launch_overhead`` (a GPU),
``loader_pyperf`` and ``resolve`` (no GPU).  The tuner and its output: ``regression``
(re-measures committed winners), ``default_vs_tuned`` and ``winners_elsewhere`` (read a
tuning run's artifacts), ``rmsnorm_predicted`` (the cost model against tuning), ``off_grid`` (the configs served for
keys no grid names against tuning those keys),
``compile_cache`` and ``fleet_overhead``.
"""
