"""The index and the search: the catalog's index of entries by device layer (:mod:`.catalog`),
the order of preference (:func:`.preference.rank_key`), matching and ties, the steps of one
search (:mod:`.steps`) and the checks of one candidate (:mod:`.candidate`), the
neighbourhood rule, collisions between sources, and the record of a resolution
(:mod:`.records`)."""
