"""flyconfigs.kernels: kernel families (RMSNorm first) and the ops users call."""
