"""nccl-tests conventions: message sizes (-b/-e/-f/-i), dtypes, busbw factors, and the reader of its logs."""
