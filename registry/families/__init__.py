"""Kernel families: the contract a plugin implements (:mod:`.contract`), what its rules
are handed (:mod:`.offers`), the loaded records of this environment (:mod:`.loaded`) and
of this process's registrations (:mod:`.registrations`), and the checked calls of a
family's members (:class:`.family.Family`)."""
