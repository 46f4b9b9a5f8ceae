"""Plan files, below the compiler and the runtime alike: the one canonical JSON text of a plan, the JSON
Schema check with path-bearing errors, the file validation `loom validate` runs, and the cache directory
where installed and JIT-compiled plans live."""
