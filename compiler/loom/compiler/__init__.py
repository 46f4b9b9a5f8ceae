"""From a program to plan text: ``emit`` (the last step after the passes), ``driver`` (compile a library
algorithm by name, a user's DSL file or function; behind ``loom compile``) and ``jit`` (compile once,
then read the plan back from the cache; ``loom.compile``). The passes themselves live in ``loom.passes``."""
