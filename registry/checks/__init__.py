"""The checks by which an artifact serves or is refused, shared by the search,
``validate`` and ``doctor``: :func:`.check.refusal`, the binding of an artifact to its
family (:mod:`.binding`), a data package folder checked eagerly, a kernel's artifact schema."""
