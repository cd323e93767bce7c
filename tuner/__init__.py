"""The tuner: plan, compile (in parallel, through the cache), verify, time, select and
emit one artifact per key, on this host's GPUs (:mod:`flyconfigs.tuner.run`) or a Ray
cluster's (:mod:`flyconfigs.tuner.fleet`), both scheduled by
:mod:`flyconfigs.tuner.scheduler`; ``flyconfigs tune`` runs a session
(:mod:`flyconfigs.tuner.session`)."""
