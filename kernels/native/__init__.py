"""Native executor: device programs, the CUDA interpreter kernel and its launcher (one launch per GPU per call)."""
