"""`buildtools index`: the find-links site and PEP 503 index, published atomically."""
